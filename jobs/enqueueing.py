"""The values of an enqueue that the engine shares with the rest of the package: a job
a handler asks for (``ChildSpec``, from ``ctx.chain``) and what ``enqueue_once`` did
(``Enqueued``).

They live apart from ``jobs.engine`` because ``jobs.context`` and the public API
(``import jobs``) need them without the engine: the engine reads the models when it is
imported, and ``jobs`` is imported while Django is still loading its apps. They name
the models in annotations only.
"""

from __future__ import annotations

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
