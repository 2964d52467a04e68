"""``manage.py jobs_status``: what the engine holds right now, at a glance."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand
from django.db.models import Count, Max, Min, Q

from jobs import clock
from jobs.conf import WORKER_STALE_SECONDS
from jobs.management.tables import ago, table
from jobs.models import Job, JobEvent, Worker

STATES = [state for state, _ in Job.State.choices]
TOP_RESCUED = 5


class Command(BaseCommand):
    help = (
        "Show job counts per type and state, the oldest due pending job of each queue, "
        "the jobs rescued from dead workers lately, and the live workers."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        now = clock.now()
        self._section("Jobs by type and state")
        self.stdout.write(self._counts())
        self._section("Due pending jobs per queue")
        self.stdout.write(self._due(now))
        self._section("Rescues from dead workers")
        self.stdout.write(self._rescues(now))
        self._section("Live workers")
        self.stdout.write(self._workers(now))

    def _section(self, title: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(title))

    def _counts(self) -> str:
        # One GROUP BY over the (type, state) index; the pivot happens here.
        rows = Job.objects.order_by().values_list("type", "state").annotate(n=Count("id"))
        by_type: dict[str, dict[str, int]] = {}
        for type_name, state, count in rows:
            by_type.setdefault(type_name, dict.fromkeys(STATES, 0))[state] = count
        if not by_type:
            return "(no jobs)"
        lines = [[name, *counts.values(), sum(counts.values())] for name, counts in sorted(by_type.items())]
        totals = [sum(line[i] for line in lines) for i in range(1, len(STATES) + 2)]
        return table(["type", *STATES, "total"], [*lines, ["(all)", *totals]])

    def _due(self, now: datetime) -> str:
        rows = (
            Job.objects.due(now)
            .order_by()
            .values_list("queue")
            .annotate(n=Count("id"), oldest=Min("run_after"))
            .order_by("queue")
        )
        if not rows:
            return "(nothing due)"
        return table(
            ["queue", "due", "oldest due since", "waiting"],
            [[queue, n, f"{oldest:%Y-%m-%d %H:%M:%S}", ago(oldest, now)] for queue, n, oldest in rows],
        )

    def _rescues(self, now: datetime) -> str:
        """Rescues in the last hour and day, and the jobs rescued most in the day: a job
        rescued again and again kills its worker (or outlives its lease) every time."""
        hour, day = now - timedelta(hours=1), now - timedelta(days=1)
        # The "rescued" history rows of a day, from the partial index on incidents.
        rescued = JobEvent.objects.filter(kind=JobEvent.Kind.RESCUED, at__gte=day)
        in_hour = Q(at__gte=hour)
        counts = rescued.aggregate(
            hour=Count("id", filter=in_hour),
            hour_jobs=Count("job", filter=in_hour, distinct=True),
            day=Count("id"),
            day_jobs=Count("job", distinct=True),
        )
        if not counts["day"]:
            return "(no rescues in the last day)"
        summary = table(
            ["window", "rescues", "jobs"],
            [
                ["last hour", counts["hour"], counts["hour_jobs"]],
                ["last day", counts["day"], counts["day_jobs"]],
            ],
        )
        top = (
            rescued.order_by()
            .values("job")
            .annotate(n=Count("id"), last=Max("at"))
            .order_by("-n", "-last")[:TOP_RESCUED]
        )
        jobs = Job.objects.in_bulk([row["job"] for row in top])
        rows = [
            [job.pk, job.type, job.state, row["n"], job.rescues, ago(row["last"], now)]
            for row in top
            if (job := jobs.get(row["job"])) is not None
        ]  # pruned meanwhile
        most = table(["job", "type", "state", "rescues (day)", "rescues (all)", "last rescued"], rows)
        return f"{summary}\n\nRescued most in the last day:\n{most}"

    def _workers(self, now: datetime) -> str:
        live = Worker.objects.filter(last_seen_at__gte=now - timedelta(seconds=WORKER_STALE_SECONDS))
        rows = [
            [w.name, w.pid, ",".join(w.queues) or "(all)", ago(w.last_seen_at, now), w.jobs_done]
            for w in live
        ]
        if not rows:
            return "(no live worker: start the cluster with manage.py qcluster)"
        return table(["worker", "pid", "queues", "last seen", "jobs done"], rows)
