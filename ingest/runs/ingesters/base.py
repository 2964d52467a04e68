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
    def fetch(self, config: dict[str, Any], session: dict[str, Any], batch_size: int, *,
              tenant: str) -> Fetched:
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
    slug); ``serializers.ValidationError`` naming each bad field otherwise."""
    if kind not in _ingesters:
        raise serializers.ValidationError({"kind": [f"no ingester of kind {kind!r}"]})
    serializer = _ingesters[kind].config_serializer(data=config, context={"tenant": tenant})
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


