"""Builders and named actors shared by the tests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from django.contrib.auth.models import Permission, User
from django.db import connections
from django.test import Client
from rest_framework.test import APIClient

from jobs import engine
from jobs.models import Job
from jobs.worker import EngineWorker
from tenancy.models import Membership, Tenant


def make_job(name: str = "tests.noop", payload: dict[str, Any] | None = None, **options: Any) -> Job:
    return engine.enqueue(name, payload or {}, **options)


def claim_one(worker: str = "w1", *, start: bool = True, **options: Any) -> tuple[Job, engine.Claim]:
    """Claim one due job and (unless ``start=False``) count its attempt, as a worker
    does when it starts the handler."""
    batch = engine.claim(worker, limit=1, **options)
    assert batch.jobs, "expected a due job to claim"
    if start:
        engine.start(batch.jobs[:1], batch.token)
    return batch.jobs[0], batch


def run_next(worker: EngineWorker | None = None) -> str:
    """Claim one job and run it through the real worker code path; return the outcome."""
    worker = worker or EngineWorker(name="test-worker", batch_size=1)
    batch = engine.claim(worker.name, limit=1)
    assert batch.jobs, "expected a due job to run"
    return worker.run_job(batch.jobs[0], batch.token)


def tenant(name: str = "Acme") -> Tenant:
    return Tenant.objects.get_or_create(name=name, slug=name.lower())[0]


def staff(
    username: str = "alice", *, of: Tenant | None = None, operator: bool = False, is_staff: bool = True
) -> User:
    user = User.objects.create_user(username, password="pw-" + username, is_staff=is_staff)
    if of is not None or operator:
        Membership.objects.create(user=user, tenant=of, is_platform_operator=operator)
    return user


def granted(user: User, *permissions: str) -> User:
    """``user`` holding each ``"app_label.codename"`` permission (an ``operate_*`` one, say)."""
    for name in permissions:
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return User.objects.get(pk=user.pk)  # a fresh permission cache


def operating(user: User) -> User:
    """``user`` holding every ``operate_*`` permission: staff who may act on anything
    their scope shows them."""
    user.user_permissions.add(*Permission.objects.filter(codename__startswith="operate_"))
    return User.objects.get(pk=user.pk)


def page(client: Client, url: str) -> str:
    """The HTML of a page that must answer 200."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def as_user(user: User) -> APIClient:
    """An API client logged in as ``user`` (by session, as a browser would be)."""
    client = APIClient()
    client.force_login(user)
    return client


@contextlib.contextmanager
def row_locked(job: Job) -> Iterator[None]:
    """Hold ``FOR UPDATE`` on the job's row from a second connection for the block, as a
    concurrent claimer or an open group commit would (needs a transactional test)."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        other = connections.create_connection("default")
        try:
            other.set_autocommit(False)
            with other.cursor() as cursor:
                cursor.execute("SELECT id FROM jobs_job WHERE id = %s FOR UPDATE", [job.pk])
            locked.set()
            release.wait(10)
            other.rollback()
        finally:
            other.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10), "the second connection never got the row lock"
        yield
    finally:
        release.set()
        holder.join()


def hit_count() -> int:
    """Rows in ``tests_hits`` (the ``hits_table`` fixture): one per run of a handler."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM tests_hits")
        return cursor.fetchone()[0]
