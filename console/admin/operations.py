"""Object operations: the one shape of every operator action in the admin.

An operation is a named action on one object (or on each of a selection): its label, the
service or engine function it calls, which objects it applies to, the question a
confirmation asks first (if it asks one), and the ``operate_<model>`` permission it needs
(``tenancy.operators``: the API and the commands ask the same). Carried out, it calls the
function with the staff user as actor and writes the admin log entry naming who did it
and why, in one transaction. The job actions (recover, retry, cancel, run now), the
outbox's, the pipelines' (a run's cancel, a snapshot job's retry, a gap-fill …) are all
``Operation``s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import models, transaction
from django.http import HttpRequest

from jobs import engine
from jobs.models import Job
from tenancy.operators import may_operate as user_may_operate
from tenancy.operators import operate_permission

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

REASON_CHARS = 500


@dataclass(frozen=True)
class Operation:
    """``call(obj, actor, reason)`` does the work (the service records the actor in the
    object's own history); ``states``, or ``applies`` when a state is not enough, only
    decide which buttons and previews to show: the service checks again under a lock.
    With neither, it applies to anything (a selection, a form's values): the service
    alone decides."""

    name: str
    label: str
    past: str
    call: Callable[[Any, Any, str], Any]
    model: type[models.Model]
    states: tuple[str, ...] = ()
    applies: Callable[..., bool] | None = None
    confirm: str = ""  # the question asked first, if any
    platform: bool = False  # a power over every tenant: platform operators only
    done: Callable[[Any, Any], str] | None = None

    @property
    def permission(self) -> str:
        return operate_permission(self.model)

    def allows(self, obj: Any, *context: Any) -> bool:
        if self.applies is not None:
            return self.applies(obj, *context)
        return not self.states or getattr(obj, "state", None) in self.states

    def permitted(self, request: HttpRequest) -> bool:
        return user_may_operate(request.user, self.model, platform=self.platform)

    def reported(self, obj: Any, result: Any) -> str:
        """What the operator is told it did."""
        if self.done is not None:
            return self.done(obj, result)
        return f"{obj._meta.verbose_name.capitalize()} {obj.pk} {self.past}."

    def perform(
        self,
        model_admin: ModelAdmin[Any],
        request: HttpRequest,
        obj: Any,
        reason: str = "",
        *,
        logged: Any = None,
        detail: str | Callable[[Any], str] = "",
    ) -> Any:
        """The call and the admin log entry (on ``logged``, or what it makes of the call's
        result when it is a function; else the object the call returns or acted on; one on
        each when it is a list: a bulk call over a selection), committed together.
        ``detail`` (or what it makes of the call's result) is added to the entry in
        brackets."""
        reason = reason.strip()[:REASON_CHARS]
        with transaction.atomic():
            result = self.call(obj, request.user, reason)
            if callable(logged):
                logged = logged(result)
            target = logged if logged is not None else (result if isinstance(result, models.Model) else obj)
            said = detail(result) if callable(detail) else detail
            message = f"{self.label} via the admin" + (f" ({said})" if said else "")
            for each in target if isinstance(target, list) else [target]:
                model_admin.log_change(request, each, message + (f": {reason}" if reason else ""))
        return result


def _engine(action: Callable[..., Job]) -> Callable[[Job, Any, str], Job]:
    return lambda job, actor, reason: action(job, actor=actor, reason=reason, via="admin")


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation(
            "recover", "Recover", "recovered", _engine(engine.recover), Job, engine.ACTION_STATES["recover"]
        ),
        Operation("retry", "Retry", "retried", _engine(engine.retry), Job, engine.ACTION_STATES["retry"]),
        Operation(
            "cancel", "Cancel", "cancelled", _engine(engine.cancel), Job, engine.ACTION_STATES["cancel"]
        ),
        Operation(
            "run_now",
            "Run now",
            "made due now",
            _engine(engine.run_now),
            Job,
            engine.ACTION_STATES["run_now"],
        ),
    )
}
# The bulk actions of the job list, by action name.
ACTION_OPERATIONS: dict[str, Operation] = {
    "recover_jobs": OPERATIONS["recover"],
    "retry_jobs": OPERATIONS["retry"],
    "cancel_jobs": OPERATIONS["cancel"],
    "run_jobs_now": OPERATIONS["run_now"],
}
# Operations that take a running job from its worker: asked twice while that worker is
# alive, since the job then really runs (its late result will be refused).
TAKES_FROM_WORKER = {"recover", "cancel"}


def may_operate(request: HttpRequest) -> bool:
    """Recover, retry, cancel and run now: staff granted ``jobs.operate_job``."""
    return user_may_operate(request.user, Job)


def operate(model_admin: ModelAdmin[Job], request: HttpRequest, op: Operation, job: Job, reason: str) -> Job:
    """The engine transition (its JobEvent names the actor) and the admin log entry."""
    changed: Job = op.perform(model_admin, request, job, reason)
    return changed
