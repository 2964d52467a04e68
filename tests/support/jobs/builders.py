"""What the engine's and the console's tests build and read, shared by their modules:
staff with the jobs app's permissions, jobs and deliveries in a given state, the rows and
messages of an admin response, a management command's output."""

from __future__ import annotations

from io import StringIO
from typing import Any

from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.http import HttpResponse

import jobs
from jobs import engine
from jobs.models import Delivery, Job
from jobs.worker import run_until_idle
from tests.support.base import claim_one, make_job, staff

# The two subscribers to "OrderPlaced" in tests/support/handlers.py: ON_ORDER fails while
# the payload says "fail" (backoff 60 s); AUDIT always succeeds.
ON_ORDER = "tests.on_order_placed"
AUDIT = "tests.audit_order"


# --- users --------------------------------------------------------------------------------


def grant(user: User, *codenames: str) -> User:
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="jobs", codename__in=codenames)
    )
    return user


def operator(username: str = "olga", *, of: Any = None) -> User:
    """Staff who may view and operate jobs, events, deliveries and workers (but is no
    superuser): a tenant's, or (no tenant) a platform operator."""
    return grant(
        staff(username, of=of, operator=of is None),
        "view_job",
        "operate_job",
        "operate_delivery",
        "view_event",
        "view_delivery",
        "view_worker",
    )


# --- jobs ---------------------------------------------------------------------------------


def running(name: str = "tests.noop", **options: Any) -> Job:
    """A job claimed by worker w1 (its priority makes the claim pick it over pending ones)."""
    job = make_job(name, priority=100, **options)
    claimed, _ = claim_one("w1")
    assert claimed.pk == job.pk
    return claimed


def failed(name: str = "tests.noop", error: str = "boom", **options: Any) -> Job:
    job = running(name, **options)
    engine.fail(job, job.lease_token, error, permanent=True, worker="w1")
    job.refresh_from_db()
    return job


# --- deliveries ---------------------------------------------------------------------------


def delivery_of(event: Any, subscriber: str = ON_ORDER) -> Delivery:
    return Delivery.objects.select_related("event", "job").get(event=event, subscriber=subscriber)


def failing(**options: Any) -> Delivery:
    """Published and attempted once: ON_ORDER's delivery waits out its backoff after an
    error (AUDIT's is delivered)."""
    event = jobs.publish("OrderPlaced", {"fail": True}, **options)
    run_until_idle()
    return delivery_of(event)


def undelivered(**options: Any) -> Delivery:
    return delivery_of(jobs.publish("OrderPlaced", {"order": 1}, **options))


def delivered(**options: Any) -> Delivery:
    event = jobs.publish("OrderPlaced", {"order": 2}, **options)
    run_until_idle()
    return delivery_of(event)


def failed_delivery(**options: Any) -> Delivery:
    delivery = failing(**options)
    job = delivery.job
    Job.objects.filter(pk=job.pk).update(max_attempts=1, state=Job.State.FAILED, finished_at=job.created_at)
    return delivery_of(delivery.event)


# --- reading what came back ---------------------------------------------------------------


def rows(response: HttpResponse) -> list[int]:
    """The primary keys on an admin list page."""
    return [row.pk for row in response.context["cl"].result_list]


def messages_of(response: HttpResponse) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def run_command(*args: str) -> str:
    """A management command's standard output (its errors are dropped)."""
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()
