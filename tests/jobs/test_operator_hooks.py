"""A local job type's operator hook (``jobs.handler(on_operator=...)``): the engine calls
it in the transaction of every operator action on one of its jobs, wherever the action
is taken, with the job as the action left it; raising ``jobs.IllegalTransition`` refuses
the action and writes nothing of it. The same call as a remote type's
``RemoteHooks.on_operator``: one mechanism for every app."""

from __future__ import annotations

import pytest

import jobs
from jobs import engine, registry
from jobs.models import Job, JobEvent
from tests.support.base import as_user, claim_one, make_job, operating, run_next, staff, tenant

pytestmark = pytest.mark.django_db

HOOKED = "tests.operator_hooked"
SEEN: list[tuple[str, int, str, object, str, bool]] = []


def _noted(job, action: str, actor, via: str) -> None:
    # What the hook sees, and whether it runs inside the action's transaction (the job's
    # new state is already written there).
    written = Job.objects.filter(pk=job.pk, state=job.state).exists()
    SEEN.append((action, job.pk, job.state, actor, via, written))
    if job.payload.get("refuse") == action:
        raise jobs.IllegalTransition(f"job {job.pk}: {action} refused by its type")


@pytest.fixture(autouse=True)
def hooked():
    SEEN.clear()
    jobs.handler(HOOKED, max_attempts=1, on_operator=_noted)(lambda ctx: {"ok": True})
    yield
    registry.unregister(HOOKED)


def test_the_hook_is_the_handlers_and_a_remote_types_is_its_hooks():
    assert registry.get(HOOKED).operator_hook is _noted
    assert registry.get("tests.noop").operator_hook is None
    remote = registry.get("tests.remote_hooked")
    assert remote.operator_hook is remote.hooks.on_operator is not None


def test_each_operator_action_reaches_the_hook_with_the_actor_and_the_door(clock):
    alice = staff("alice")
    job = make_job(HOOKED)

    engine.run_now(job, actor=alice, via="admin")
    engine.cancel(job, actor=alice, via="command")
    engine.retry(job, actor=alice, via="api")
    claim_one()
    engine.recover(job, actor=alice, via="admin")
    assert run_next() == "succeeded"
    engine.replay(job, actor=None, via="command")

    assert SEEN == [
        ("run_now", job.pk, "pending", alice, "admin", True),
        ("cancel", job.pk, "cancelled", alice, "command", True),
        ("retry", job.pk, "pending", alice, "api", True),
        ("recover", job.pk, "pending", alice, "admin", True),
        ("replay", job.pk, "pending", None, "command", True),
    ]


def test_a_hook_that_refuses_the_action_leaves_the_job_as_it_was(clock):
    job = make_job(HOOKED, {"refuse": "retry"})
    engine.cancel(job)

    with pytest.raises(jobs.IllegalTransition, match=f"job {job.pk}: retry refused by its type"):
        engine.retry(job, actor=staff("bob"), via="admin")

    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert not job.events.filter(kind=JobEvent.Kind.RETRIED).exists()


def test_the_apis_action_reaches_the_hook_and_its_refusal_is_a_conflict(clock):
    acme = tenant("Acme")
    olga = operating(staff("olga", of=acme))
    allowed = make_job(HOOKED, tenant=acme)
    refused = make_job(HOOKED, {"refuse": "cancel"}, tenant=acme)
    client = as_user(olga)

    assert client.post(f"/api/jobs/{allowed.pk}/cancel/").status_code == 200
    response = client.post(f"/api/jobs/{refused.pk}/cancel/")

    assert response.status_code == 409 and "cancel refused by its type" in response.json()["detail"]
    refused.refresh_from_db()
    assert refused.state == Job.State.PENDING
    assert [(action, pk, via) for action, pk, _, _, via, _ in SEEN] == [
        ("cancel", allowed.pk, "api"),
        ("cancel", refused.pk, "api"),
    ]
