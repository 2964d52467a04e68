"""What the CO2 calculator's commands share: the ``--user`` argument, the service's errors
as ``CommandError`` messages, and how a started pipeline is reported. The acting user is
``console.cli.actor``'s, re-exported here for the demo loader."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.cli import actor
from factors import services
from factors.catalog import ModuleType
from factors.models import ReportModule

__all__ = ["actor", "add_user_argument", "module_of", "opened", "run"]


def add_user_argument(parser: CommandParser) -> None:
    parser.add_argument(
        "--user", metavar="USERNAME", help="Record this (existing) user as the one who asked."
    )


def module_of(report_id: int, module_type: str) -> ReportModule:
    if module_type not in ModuleType.values:
        raise CommandError(f"unknown module {module_type!r}; use one of {', '.join(ModuleType.values)}")
    module = ReportModule.objects.filter(report_id=report_id, module_type=module_type).first()
    if module is None:
        raise CommandError(f"no report {report_id} (or it has no {module_type} module)")
    return module


@contextmanager
def opened(path: str) -> Iterator[BinaryIO]:
    file = Path(path)
    if not file.is_file():
        raise CommandError(f"no file at {path}")
    with file.open("rb") as handle:
        yield handle


def run(command: BaseCommand, start: Callable[[], services.Dispatched]) -> services.Dispatched:
    """Call a service; its refusals become CommandErrors that say why."""
    try:
        result = start()
    except services.UploadRejected as exc:
        lines = [str(error) for error in exc.report.errors]
        more = exc.report.error_count - len(lines)
        lines.insert(0, f"refused, nothing written ({exc.report.error_count} error(s)):")
        if more:
            lines.append(f"… and {more} more")
        raise CommandError("\n".join(lines)) from exc
    except services.InvalidRequest as exc:
        raise CommandError(str(exc)) from exc
    except services.AlreadyRunning as exc:
        raise CommandError(str(exc)) from exc
    job = result.job
    verb = "Started" if result.created else "Already queued:"
    rows = f", {result.rows:,} rows" if result.rows is not None else ""
    command.stdout.write(
        command.style.SUCCESS(f"{verb} job {job.pk} ({job.type}{rows}), pipeline {job.pipeline_id}")
    )
    command.stdout.write(f"Follow it: manage.py jobs_status, or GET /sync/pipelines/{job.pipeline_id}")
    return result
