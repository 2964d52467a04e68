"""The operator actions on jobs (recover, retry, cancel, run now), as the admin offers
them: who may take them, and how one is taken, with the staff user as the engine's actor
and an entry in the admin's log. The job pages and the triage pages share them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction
from django.http import HttpRequest

from jobs import engine
from jobs.models import Job

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

REASON_CHARS = 500


@dataclass(frozen=True)
class Operation:
    """An operator transition offered by the admin. ``states`` only decides which buttons
    and previews to show: the engine checks the state again under a row lock."""

    name: str
    label: str
    past: str
    states: tuple[str, ...]
    apply: Callable[..., Job]

    def allows(self, job: Job) -> bool:
        return job.state in self.states


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("recover", "Recover", "recovered", engine.ACTION_STATES["recover"], engine.recover),
        Operation("retry", "Retry", "retried", engine.ACTION_STATES["retry"], engine.retry),
        Operation("cancel", "Cancel", "cancelled", engine.ACTION_STATES["cancel"], engine.cancel),
        Operation("run_now", "Run now", "made due now", engine.ACTION_STATES["run_now"], engine.run_now),
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
    """Recover, retry, cancel and run now: staff granted the job model's change permission."""
    return request.user.has_perm("jobs.change_job")


def operate(model_admin: ModelAdmin[Job], request: HttpRequest, op: Operation, job: Job, reason: str) -> Job:
    """The engine transition (its JobEvent names the actor) and the admin log entry,
    committed together."""
    reason = reason.strip()[:REASON_CHARS]
    with transaction.atomic():
        changed = op.apply(job, actor=request.user, reason=reason)
        message = f"{op.label} via the admin" + (f": {reason}" if reason else "")
        model_admin.log_change(request, changed, message)
    return changed
