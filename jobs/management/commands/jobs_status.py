"""``manage.py jobs_status``: what the engine holds right now, at a glance."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand
from django.db.models import Count, Min

from jobs import clock
from jobs.conf import WORKER_STALE_SECONDS
from jobs.management.tables import ago, table
from jobs.models import Job, Worker

STATES = [state for state, _ in Job.State.choices]


class Command(BaseCommand):
    help = ("Show job counts per type and state, the oldest due pending job of each queue, "
            "and the live workers.")

    def handle(self, *args: Any, **options: Any) -> None:
        now = clock.now()
        self._section("Jobs by type and state")
        self.stdout.write(self._counts())
        self._section("Due pending jobs per queue")
        self.stdout.write(self._due(now))
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
        lines = [[name, *counts.values(), sum(counts.values())]
                 for name, counts in sorted(by_type.items())]
        totals = [sum(line[i] for line in lines) for i in range(1, len(STATES) + 2)]
        return table(["type", *STATES, "total"], [*lines, ["(all)", *totals]])

    def _due(self, now: datetime) -> str:
        rows = (Job.objects.due(now).order_by().values_list("queue")
                .annotate(n=Count("id"), oldest=Min("run_after")).order_by("queue"))
        if not rows:
            return "(nothing due)"
        return table(["queue", "due", "oldest due since", "waiting"],
                     [[queue, n, f"{oldest:%Y-%m-%d %H:%M:%S}", ago(oldest, now)]
                      for queue, n, oldest in rows])

    def _workers(self, now: datetime) -> str:
        live = Worker.objects.filter(
            last_seen_at__gte=now - timedelta(seconds=WORKER_STALE_SECONDS))
        rows = [[w.name, w.pid, ",".join(w.queues) or "(all)", ago(w.last_seen_at, now),
                 w.jobs_done] for w in live]
        if not rows:
            return "(no live worker: start the cluster with manage.py qcluster)"
        return table(["worker", "pid", "queues", "last seen", "jobs done"], rows)
