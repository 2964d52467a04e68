"""Plain-text tables and argument types shared by the engine's management commands."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs import clock

DURATION_RE = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [bool(rows) and all(isinstance(r[i], int) for r in rows) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(
            cell.rjust(w) if numeric[i] else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    return "\n".join(line(row) for row in cells)


def since(value: str) -> datetime:
    """``--since``: a duration back from now (``30m``, ``2h``, ``7d``) or an ISO datetime."""
    match = DURATION_RE.match(value.strip())
    if match:
        amount, unit = match.groups()
        return clock.now() - timedelta(**{UNITS[unit]: int(amount)})
    parsed = parse_datetime(value.strip())
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither a duration like 30m, 2h, 7d nor an ISO datetime"
        )
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least 1")
    return number


def name_list(value: str) -> list[str]:
    """A comma-separated list of names (``default,maintenance``)."""
    return [item.strip() for item in value.split(",") if item.strip()]


def ago(moment: datetime | None, now: datetime) -> str:
    """``3m 12s``-style age of ``moment`` (``-`` when unknown)."""
    if moment is None:
        return "-"
    return duration(now - moment)


def duration(span: timedelta) -> str:
    """``3m 12s``, ``7d``: the two largest units of a span."""
    seconds = max(int(span.total_seconds()), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0s"
