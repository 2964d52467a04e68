"""The contract of an ingester: one batch of a source's records at a time.

An ingester is stateless. Everything it needs to go on from where the last batch ended
is in ``session``, the JSON object the previous batch returned (``{}`` for the first),
so that any worker can fetch any batch and a retried batch fetches the same records.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from rest_framework import serializers

from ingest.runs.errors import SourceError


@dataclass(frozen=True)
class Fetched:
    records: list[dict[str, Any]]  # JSON objects, at most the batch size
    session: dict[str, Any]  # handed to the next batch
    has_more: bool  # False: the source is exhausted, the run's ingesting is done


class Ingester(ABC):
    """Subclasses name their ``kind``, validate a source's ``config`` with
    ``config_serializer`` and fetch with ``fetch``; ``@register`` makes them usable."""

    kind: ClassVar[str]
    label: ClassVar[str]
    config_serializer: ClassVar[type[serializers.Serializer]]

    @abstractmethod
    def fetch(
        self, config: dict[str, Any], session: dict[str, Any], batch_size: int, *, tenant: str
    ) -> Fetched:
        """The next batch after ``session`` for the source of ``tenant`` (its slug: what
        the source may reach can depend on whose it is). Raises
        ``ingest.runs.errors.SourceError`` (transient or not) when the source cannot give it."""


IngesterClass = TypeVar("IngesterClass", bound=type[Ingester])

_ingesters: dict[str, type[Ingester]] = {}


def register(cls: IngesterClass) -> IngesterClass:
    if cls.kind in _ingesters and _ingesters[cls.kind] is not cls:
        raise ValueError(f"two ingesters of kind {cls.kind!r}")
    _ingesters[cls.kind] = cls
    return cls


def get(kind: str) -> Ingester:
    """The ingester of ``kind``; ``KeyError`` if none is registered."""
    return _ingesters[kind]()


def kinds() -> list[tuple[str, str]]:
    """(kind, label) of each registered ingester, for choices."""
    return sorted((kind, cls.label) for kind, cls in _ingesters.items())


def validate_config(kind: str, config: Any, *, tenant: str) -> dict[str, Any]:
    """``config`` as the ingester of ``kind`` accepts it for a source of ``tenant`` (its
    slug), normalised (defaults filled in, values of the types the ingester reads): what
    is stored, and what the ingester is given. ``serializers.ValidationError`` naming each
    bad field otherwise."""
    if kind not in _ingesters:
        raise serializers.ValidationError({"kind": [f"no ingester of kind {kind!r}"]})
    serializer = _ingesters[kind].config_serializer(data=config, context={"tenant": tenant})
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def usable_config(kind: str, config: Any, *, tenant: str) -> dict[str, Any]:
    """``validate_config`` for a run: a stored config the ingester cannot use (saved
    before configs were checked, or written by a migration) is a ``SourceError`` that
    retrying cannot help, naming each problem, instead of an ingester tripping over it
    with an error that would be retried as transient."""
    try:
        return validate_config(kind, config, tenant=tenant)
    except serializers.ValidationError as exc:
        raise SourceError(
            "the source's config cannot be used: " + "; ".join(problems(exc.detail)), transient=False
        ) from None


def problems(detail: Any, prefix: str = "") -> list[str]:
    """A DRF error detail (nested dicts and lists) as lines naming each field."""
    if isinstance(detail, dict):
        return [
            line
            for name, inner in detail.items()
            for line in problems(inner, prefix if name == "non_field_errors" else f"{prefix}{name}: ")
        ]
    if isinstance(detail, list):
        return [line for inner in detail for line in problems(inner, prefix)]
    return [f"{prefix}{detail}"]
