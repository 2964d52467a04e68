"""How fast the console's summary pages answer with a million jobs in the table.

A scratch database on the project's server (the embedded PostgreSQL, or the server of
``DATABASE_URL``) gets ``--jobs`` jobs written by one INSERT … SELECT, shaped like a
week of steady work: 97 % succeeded, 1 % failed (a dozen error patterns with numbers
and hosts that vary), 2 % pending and due, a few running (some past their lease), a few
rescued in the last hour, three tenants, one pipeline per 40 jobs, two queues. After
``VACUUM ANALYZE`` each page is requested ``--samples`` times through Django's test
client, as a platform superuser and as a tenant's staff, and the table gives p50 and
p95 in milliseconds. ``--backlog N`` then makes N succeeded jobs pending and due (a
cluster that fell behind) and measures again.

    python -m bench.overview [--jobs 1000000] [--samples 30] [--backlog 300000]

The scratch database is dropped afterwards, whatever happened.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import scratch_project

ERRORS = [
    "'ValueError: row ' || (i %% 997) || ' has no unit kg'",
    "'ConnectionError: host 10.0.0.' || (i %% 7) || ' refused the connection'",
    "'KeyError: ''factor ' || (i %% 89) || ''''",
    "'OSError: cannot read /var/data/t' || (i %% 3) || '/day-' || (i %% 31) || '.csv'",
    "'HandlerTimeout: ran past its time limit of 300 s'",
]

JOBS_SQL = """
INSERT INTO jobs_job (type, queue, priority, state, payload, progress_done, attempts,
    max_attempts, run_after, locked_by, locked_at, heartbeat_at, lease_expires_at,
    lease_token, rescues, pipeline_id, is_current, key_scope, tenant_id, error_kind,
    last_error, created_at, started_at, finished_at, progress_message, waits)
SELECT 'bench.t' || (i %% 12),
       CASE WHEN i %% 5 = 0 THEN 'maintenance' ELSE 'default' END,
       0, s.state, '{}'::jsonb, 0,
       CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END, 5,
       t.created, '', NULL, NULL, NULL, NULL, 0,
       md5('pipeline' || (i / 40))::uuid, false, 0,
       CASE WHEN i %% 4 = 0 THEN NULL ELSE (%(tenants)s::bigint[])[1 + i %% 3] END,
       CASE WHEN s.state = 'failed' THEN 'permanent' ELSE '' END,
       CASE WHEN s.state = 'failed' THEN (CASE i %% 5 {errors} END) ELSE '' END,
       t.created,
       CASE WHEN s.state = 'pending' THEN NULL ELSE t.created + interval '1 second' END,
       CASE WHEN s.state = 'pending' THEN NULL ELSE t.created + interval '3 seconds' END,
       '', false
FROM generate_series(1, %(jobs)s) AS i,
     LATERAL (SELECT now() - (%(jobs)s - i) * (interval '7 days' / %(jobs)s) AS created) t,
     LATERAL (SELECT CASE WHEN i %% 1000 < 10 THEN 'failed'
                          WHEN i %% 1000 < 30 THEN 'pending'
                          ELSE 'succeeded' END AS state) s
"""

RUNNING_SQL = """
UPDATE jobs_job SET state = 'running', finished_at = NULL, locked_by = 'bench-w' || (id %% 4),
    locked_at = now() - interval '1 minute', heartbeat_at = now() - interval '10 seconds',
    lease_expires_at = CASE WHEN id %% 10 = 0 THEN now() - interval '5 minutes'
                            ELSE now() + interval '1 minute' END,
    lease_token = md5(id::text)::uuid, last_error = '', error_kind = ''
WHERE id IN (SELECT id FROM jobs_job WHERE state = 'succeeded' ORDER BY id DESC LIMIT %(running)s)
"""

RESCUED_SQL = """
WITH picked AS (
    UPDATE jobs_job SET rescues = 1
    WHERE id IN (SELECT id FROM jobs_job WHERE state = 'succeeded' ORDER BY id DESC
                 OFFSET 500 LIMIT %(rescued)s)
    RETURNING id)
INSERT INTO jobs_jobevent (job_id, at, kind, from_status, to_status, message, attempt, worker)
SELECT id, now() - interval '20 minutes', 'rescued', 'running', 'pending',
       'lease expired', 1, 'bench-w0' FROM picked
"""

BACKLOG_SQL = """
UPDATE jobs_job SET state = 'pending', finished_at = NULL, started_at = NULL, attempts = 0,
    run_after = created_at
WHERE id IN (SELECT id FROM jobs_job WHERE state = 'succeeded' ORDER BY id LIMIT %(backlog)s)
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument(
        "--backlog",
        type=int,
        default=300_000,
        help="Succeeded jobs made pending and due for the second pass (0: none).",
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    with scratch_project("bench_overview", DEBUG="false", ALLOWED_HOSTS="testserver"):
        rows, server = _run(args)
    print(table(rows, args, server))
    return 0


def _run(args: argparse.Namespace) -> tuple[list[tuple[str, str, list[float]]], str]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    superuser, tenant_staff = _load(args)
    rows = _measure("steady", superuser, tenant_staff, args.samples)
    if args.backlog:
        with connection.cursor() as cursor:
            cursor.execute(BACKLOG_SQL, {"backlog": args.backlog})
            cursor.execute("VACUUM ANALYZE jobs_job")
        rows += _measure(f"backlog {args.backlog:,}", superuser, tenant_staff, args.samples)
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server = cursor.fetchone()[0]
    return rows, server


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    from django.contrib.auth.models import Permission, User
    from django.db import connection

    from tenancy.models import Membership, Tenant

    tenants = [Tenant.objects.create(name=f"Tenant {n}", slug=f"tenant-{n}").pk for n in range(3)]
    superuser = User.objects.create_superuser("bench-admin", password="x")
    tenant_staff = User.objects.create_user("bench-staff", password="x", is_staff=True)
    Membership.objects.create(user=tenant_staff, tenant_id=tenants[0])
    tenant_staff.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="jobs", codename__in=["view_job", "change_job"])
    )
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cases = " ".join(f"WHEN {n} THEN {expression}" for n, expression in enumerate(ERRORS))
        cursor.execute(JOBS_SQL.replace("{errors}", cases), {"jobs": args.jobs, "tenants": tenants})
        cursor.execute(RUNNING_SQL, {"running": 40})
        cursor.execute(RESCUED_SQL, {"rescued": 25})
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE jobs_job")
        cursor.execute("VACUUM ANALYZE jobs_jobevent")
    print(f"loaded {args.jobs:,} jobs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return superuser, tenant_staff


def _measure(
    phase: str, superuser: Any, tenant_staff: Any, samples: int
) -> list[tuple[str, str, list[float]]]:
    from django.test import Client

    from console import triage
    from jobs.models import Job
    from tenancy.scoping import scope_queryset

    rows = []
    for who, user in (("superuser", superuser), ("tenant staff", tenant_staff)):
        visible = scope_queryset(Job.objects.all(), user)
        group = triage.groups(visible, triage.window_start("24h"), limit=1)[0].fingerprint
        pages = {
            "front page (overview)": "/admin/",
            "failure triage, 24 h": "/admin/jobs/job/triage/?window=24h",
            "failure triage, 7 d": "/admin/jobs/job/triage/?window=7d",
            "a group's retry preview": f"/admin/jobs/job/triage/{group}/retry/?window=24h",
            "job list of a group": f"/admin/jobs/job/?failure=24h:{group}",
        }
        client = Client()
        client.force_login(user)
        for label, url in pages.items():
            rows.append((f"{phase}: {label}", who, _time(lambda u=url, c=client: _get(c, u), samples)))
    return rows


def _get(client: Any, url: str) -> None:
    response = client.get(url)
    if response.status_code != 200:
        raise SystemExit(f"{url}: HTTP {response.status_code}")


def _time(call: Callable[[], None], samples: int) -> list[float]:
    call()  # warm: templates compiled, sessions read
    timings = []
    for _ in range(samples):
        started = time.perf_counter()
        call()
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def table(rows: list[tuple[str, str, list[float]]], args: argparse.Namespace, server: str) -> str:
    lines = [
        f"Console pages, {args.jobs:,} jobs, PostgreSQL {server}, {os.cpu_count()} CPUs, "
        f"{args.samples} requests each (ms)",
        "",
        f"{'page':<48} {'as':<13} {'p50':>7} {'p95':>7} {'max':>7}",
    ]
    for label, who, timings in rows:
        ordered = sorted(timings)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        lines.append(
            f"{label:<48} {who:<13} {statistics.median(ordered):>7.1f} {p95:>7.1f} {ordered[-1]:>7.1f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
