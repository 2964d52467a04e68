"""Builders for the ingest tests: sources with hooks."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ingest.runs.models import Hook, IngestSource
from tenancy.models import Tenant
from tests.ingest import plugins  # noqa: F401  (registers the test source)

PASS = ["true"]


def exit_with(code: int, output: str = "") -> list[str]:
    return [sys.executable, "-c", f"import sys; print({output!r}); sys.exit({code})"]


def source(tenant: Tenant, name: str = "orders", *, batches: int = 3, size: int = 2,
           hooks: Sequence[Sequence[str]] = (PASS,), max_failures: int = 3,
           kind: str = "test_counting", config: dict[str, Any] | None = None) -> IngestSource:
    made = IngestSource.objects.create(
        tenant=tenant, name=name, kind=kind, max_failures=max_failures,
        config=config if config is not None else {"batches": batches, "size": size})
    for position, command in enumerate(hooks):
        Hook.objects.create(source=made, name=f"hook{position}", position=position,
                            image="registry.example/hooks:1", command=list(command))
    return made
