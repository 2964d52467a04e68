"""Builders for the ingest tests: catalogue entries, and sources with hooks that use them."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ingest.runs.models import Hook, HookTemplate, IngestSource
from tenancy.models import Tenant
from tests.support.ingest import plugins  # noqa: F401  (registers the test source)

PASS = ["true"]


def exit_with(code: int, output: str = "") -> list[str]:
    return [sys.executable, "-c", f"import sys; print({output!r}); sys.exit({code})"]


def entry(
    command: Sequence[str] = PASS, name: str = "check", *, tenants: Sequence[Tenant] = (), **fields: Any
) -> HookTemplate:
    """A catalogue entry running ``command``, enabled and offered to every tenant (or
    to ``tenants``) unless ``fields`` say otherwise."""
    made = HookTemplate.objects.create(
        name=name, command=list(command), **{"image": "registry.example/hooks:1", "enabled": True, **fields}
    )
    made.tenants.set(tenants)
    return made


def source(
    tenant: Tenant,
    name: str = "orders",
    *,
    batches: int = 3,
    size: int = 2,
    hooks: Sequence[Sequence[str] | HookTemplate] = (PASS,),
    max_failures: int = 3,
    kind: str = "test_counting",
    config: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
) -> IngestSource:
    """A source whose hooks run ``hooks``: each a command (an entry offered to the
    tenant alone is made for it) or a catalogue entry (the hook gives it ``parameters``)."""
    made = IngestSource.objects.create(
        tenant=tenant,
        name=name,
        kind=kind,
        max_failures=max_failures,
        config=config if config is not None else {"batches": batches, "size": size},
    )
    for position, hook in enumerate(hooks):
        template = (
            hook
            if isinstance(hook, HookTemplate)
            else entry(hook, f"{tenant.slug}-{name}-hook{position}", tenants=[tenant])
        )
        Hook.objects.create(
            source=made,
            name=f"hook{position}",
            position=position,
            template=template,
            parameters=parameters or {},
        )
    return made


def run_instead(source: IngestSource, command: Sequence[str]) -> None:
    """The source's hooks run ``command`` from now on (an operator changed their entries,
    say, after fixing a bug in the hook)."""
    HookTemplate.objects.filter(hooks__source=source).update(command=list(command))
