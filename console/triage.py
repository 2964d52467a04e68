"""Failure triage: failed jobs grouped by what went wrong, so that one cause fixed is one
group retried, not five hundred jobs read one by one.

A failure's group is its job type and its *pattern*: the first line of its error (the
``Type: message`` line the worker writes) with what varies from job to job masked —
UUIDs, hexadecimal ids, file paths, numbers. ``KeyError: 'row 17'`` and
``KeyError: 'row 90'`` are one group; ``KeyError: 'code'`` is another.

The masks are applied by PostgreSQL (``regexp_replace``), so a group is found, counted
and retried without loading the errors into Python; ``pattern`` applies the very same
masks in Python, and a test holds the two to agreement. The expressions use only what
Python's ``re`` and PostgreSQL's regular expressions read alike (no ``\\b``, which is a
backspace to PostgreSQL).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import CharField, Count, Exists, F, Func, Max, Min, OuterRef, QuerySet, Value
from django.db.models.functions import MD5, Concat, Left

from jobs import clock
from jobs.models import Delivery, Job

# The windows a triage page looks back over; the partial index jobs_job_finished_idx bounds
# the rows read to the failures of the window.
WINDOWS: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
}
DEFAULT_WINDOW = "24h"
# How many groups a page lists, biggest first.
GROUP_LIMIT = 50
# Groups are made of the newest this many failures of the window: five regular
# expressions per failure are cheap, but not for every failure of a storm.
NEWEST = 20_000
# A pattern is read from at most this much of the error's first line.
LINE_CHARS = 300

# Applied in order: a UUID or a path would otherwise be cut into numbers first.
MASKS: tuple[tuple[str, str], ...] = (
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<uuid>"),
    (r"0[xX][0-9a-fA-F]+", "<hex>"),
    (r"[0-9a-fA-F]{16,}", "<hex>"),
    (r"(/[^/\s'\",:;()<>]+)+/?", "<path>"),
    (r"[0-9]+", "<n>"),
)
_COMPILED = tuple((re.compile(expression), token) for expression, token in MASKS)


def pattern(error: str) -> str:
    """The masked first line of ``error`` (what ``pattern_expression`` computes)."""
    line = error.split("\n", 1)[0][:LINE_CHARS]
    for expression, token in _COMPILED:
        line = expression.sub(token, line)
    return line


def fingerprint(type_name: str, error_pattern: str) -> str:
    """A group's id in a URL (``md5_expression`` in SQL)."""
    return hashlib.md5(f"{type_name}\n{error_pattern}".encode(), usedforsecurity=False).hexdigest()


class _RegexpReplace(Func):
    function = "regexp_replace"
    output_field = CharField()


def pattern_expression() -> Any:
    """``pattern(last_error)``, computed by PostgreSQL."""
    expression: Any = Left(
        Func(F("last_error"), Value("\n"), Value(1), function="split_part", output_field=CharField()),
        LINE_CHARS,
    )
    for regex, token in MASKS:
        expression = _RegexpReplace(expression, Value(regex), Value(token), Value("g"))
    return expression


def md5_expression() -> Any:
    """``fingerprint(type, pattern)``, computed by PostgreSQL over an annotated ``pattern``."""
    return MD5(Concat(F("type"), Value("\n"), F("pattern"), output_field=CharField()))


@dataclass(frozen=True)
class FailureGroup:
    type: str
    pattern: str
    fingerprint: str
    count: int
    tenants: int
    first_seen: datetime
    last_seen: datetime
    sample: Job  # the newest failure of the group, with its whole error


def window_start(window: str, now: datetime | None = None) -> datetime:
    """Raises KeyError for a window not offered."""
    return (now or clock.now()) - WINDOWS[window]


def failed_since(jobs: QuerySet[Job], since: datetime) -> QuerySet[Job]:
    """Jobs that failed since ``since`` (jobs_job_failed_idx) and may be retried: not the job
    of a quarantined delivery, which waits for its release. ``jobs`` is already narrowed
    to what the caller may see."""
    quarantined = Delivery.objects.filter(job=OuterRef("pk"), quarantined_at__isnull=False)
    return jobs.filter(state=Job.State.FAILED, finished_at__gte=since).filter(~Exists(quarantined))


def failures(jobs: QuerySet[Job], since: datetime) -> QuerySet[Job]:
    """``failed_since``, annotated with each failure's pattern."""
    return failed_since(jobs, since).annotate(pattern=pattern_expression())


def groups(
    jobs: QuerySet[Job], since: datetime, *, limit: int = GROUP_LIMIT, newest: int = NEWEST
) -> list[FailureGroup]:
    """The failure groups of the newest ``newest`` failures since ``since``, biggest first."""
    # From the newest-th failure's time on: a range of jobs_job_failed_idx, where "the ids of
    # the newest N" as a subquery would have PostgreSQL hash them against the whole table.
    cutoff = (
        failed_since(jobs, since)
        .order_by("-finished_at", "-id")
        .values_list("finished_at", flat=True)[newest - 1 : newest]
        .first()
    )
    return _summarise(failures(jobs, max(since, cutoff) if cutoff else since), limit)


def more_than(jobs: QuerySet[Job], since: datetime, newest: int = NEWEST) -> bool:
    """Whether more failed since ``since`` than ``groups`` reads."""
    return failed_since(jobs, since).order_by()[newest : newest + 1].exists()


def members(jobs: QuerySet[Job], since: datetime, group: str) -> QuerySet[Job]:
    """The failed jobs of group ``group`` (a fingerprint) since ``since``."""
    return failures(jobs, since).annotate(fingerprint=md5_expression()).filter(fingerprint=group)


def find(jobs: QuerySet[Job], since: datetime, group: str) -> FailureGroup | None:
    """One group by its fingerprint, or None when it has no failure left in the window."""
    found = _summarise(members(jobs, since, group), 1)
    return found[0] if found else None


def _summarise(failed: QuerySet[Job], limit: int) -> list[FailureGroup]:
    rows = list(
        failed.order_by()
        .values("type", "pattern")
        .annotate(
            count=Count("id"),
            tenants=Count("tenant", distinct=True),
            first_seen=Min("finished_at"),
            last_seen=Max("finished_at"),
            sample_id=Max("id"),
        )
        .order_by("-count", "type", "pattern")[:limit]
    )
    # The payload, tenant and pipeline say what the sample works for (its subject).
    samples = Job.objects.only("id", "type", "last_error", "payload", "tenant_id", "pipeline_id").in_bulk(
        [row["sample_id"] for row in rows]
    )
    return [
        FailureGroup(
            type=row["type"],
            pattern=row["pattern"],
            fingerprint=fingerprint(row["type"], row["pattern"]),
            count=row["count"],
            tenants=row["tenants"],
            first_seen=row["first_seen"],
            last_seen=row["last_seen"],
            sample=samples[row["sample_id"]],
        )
        for row in rows
        if row["sample_id"] in samples
    ]
