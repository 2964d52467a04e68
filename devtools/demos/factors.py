"""The CO2 calculator's demo (``manage.py demo factors``): a filled CO2 report for a new
user, loaded through the same pipelines an operator would use (unit sync, factor
uploads, CSV uploads, manual edits).

Idempotent: once the demo is complete (its manual entries exist), it does nothing. It
runs the jobs it starts in this process, so the report is filled when it returns, with
or without a cluster running.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

import jobs
from factors import services
from factors.models import CarbonReport, DataEntry, ReportModule

DEMO = Path(__file__).resolve().parent / "data" / "factors"
YEAR = 2024
MANUAL = [  # (unit, module, entry): a few edits made by hand in the UI
    (
        "DEMO-CHEM",
        "travel",
        {
            "data_entry_type": "plane",
            "quantity": "9350",
            "classification": {"haul": "long", "cabin": "economy"},
        },
    ),
    (
        "DEMO-CHEM",
        "travel",
        {"data_entry_type": "train", "quantity": "612.5", "classification": {"network": "international"}},
    ),
    (
        "DEMO-PHYS",
        "purchases",
        {"data_entry_type": "goods", "quantity": "18400", "classification": {"category": "it_equipment"}},
    ),
]
MODULE_OF = {
    "plane": "travel",
    "train": "travel",
    "car": "travel",
    "electricity": "energy",
    "heating": "energy",
    "goods": "purchases",
    "services": "purchases",
}


def load(write: Callable[[str], Any], *, actor: Any, timeout: float) -> None:
    """Load the demo organisation, its factors and several thousand entries for 2024,
    waiting at most ``timeout`` seconds for each step's jobs."""
    if DataEntry.objects.filter(
        module__report__unit__code__startswith="DEMO-", source=DataEntry.Source.MANUAL
    ).exists():
        write("The demo is already loaded.")
        return
    _units(actor, timeout)
    _factors(actor, timeout)
    _entries(actor, timeout)
    _manual_entries(actor)
    for report in CarbonReport.objects.filter(unit__code__startswith="DEMO-", year=YEAR):
        stats = report.stats
        write(
            f"{report}: {stats['entries']:,} entries, {stats['kg_co2e']} kg CO2e"
            f" ({stats['without_factor']} without factor)"
        )
    write("Demo loaded: see /admin/factors/carbonreport/")


def _units(actor: Any, timeout: float) -> None:
    with (DEMO / "units.json").open("rb") as handle:
        _wait([services.sync_units(YEAR, source=handle, filename="units.json", actor=actor).job], timeout)


def _factors(actor: Any, timeout: float) -> None:
    started = []
    for path in sorted((DEMO / "factors").glob("*.csv")):
        with path.open("rb") as handle:
            started.append(services.upload_factors(path.stem, handle, filename=path.name, actor=actor).job)
    _wait(started, timeout)


def _entries(actor: Any, timeout: float) -> None:
    started = []
    for path in sorted((DEMO / "entries").glob("*.csv")):
        code, data_entry_type = path.stem.split("_")
        module = ReportModule.objects.get(
            report__unit__code=code, report__year=YEAR, module_type=MODULE_OF[data_entry_type]
        )
        with path.open("rb") as handle:
            started.append(
                services.dispatch_csv(module, data_entry_type, handle, filename=path.name, actor=actor).job
            )
    _wait(started, timeout)


def _manual_entries(actor: Any) -> None:
    for code, module_type, entry in MANUAL:
        module = ReportModule.objects.get(report__unit__code=code, report__year=YEAR, module_type=module_type)
        services.create_entry(module.pk, entry, actor=actor)


def _wait(started: list[jobs.Job], timeout: float) -> None:
    """Run due jobs here until these pipelines are done (a cluster may help)."""
    pipelines = {job.pipeline_id for job in started}
    deadline = time.monotonic() + timeout
    while jobs.busy_pipelines(pipelines):
        if not jobs.run_until_idle():
            time.sleep(0.2)
        if time.monotonic() > deadline:
            raise CommandError("the demo's jobs did not finish in time; see manage.py jobs_status")
    failed = [
        job for pipeline in sorted(pipelines) for job in jobs.pipeline_jobs(pipeline) if job.state == "failed"
    ]
    if failed:
        raise CommandError(f"demo job {failed[0].pk} ({failed[0].type}) failed: {failed[0].last_error}")
