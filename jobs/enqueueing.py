"""The values of an enqueue that the engine shares with the rest of the package: a job
a handler asks for (``ChildSpec``, from ``ctx.chain``), what ``enqueue_once`` did
(``Enqueued``) and the outcome of a job another waited on (``Prerequisite``).

They live apart from ``jobs.engine`` because ``jobs.context`` and the public API
(``import jobs``) need them without the engine: the engine reads the models when it is
imported, and ``jobs`` is imported while Django is still loading its apps. They name
the models in annotations only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.models import Job


@dataclass
class ChildSpec:
    """A job to enqueue when its parent succeeds (``ctx.chain``)."""

    name: str
    payload: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Enqueued:
    """What ``enqueue_once`` did: the job that holds the key now, and whether this call
    created it (False: another job already held the key and is returned instead)."""

    job: Job
    created: bool

    def __iter__(self) -> Iterator[Any]:
        """``job, created = jobs.enqueue_once(...)``, as with Django's ``get_or_create``."""
        return iter((self.job, self.created))


@dataclass(frozen=True)
class Prerequisite:
    """A finished job that a fan-in job waited on (``enqueue(..., after=...)``), as its
    handler reads it with ``ctx.prerequisites()``."""

    id: int
    type: str
    state: str
    payload: dict[str, Any]
    result: Any

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"
