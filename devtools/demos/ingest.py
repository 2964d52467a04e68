"""The ingest demo (``manage.py demo ingest``): one ingest source and one finished run for
a new user, made through the same services an operator uses: the source reads the order
files in ``devtools/demos/data/orders`` (copied below the file sources' first root) in
batches of 25, and every batch passes the ``check_records`` hook as a local process
before it is published. The hook is the demo's catalogue entry ``check-records``,
enabled and offered to every tenant, with the fields to require and the one to keep
unique as its parameters.

Idempotent: once the demo source has a run, it does nothing. Without a cluster, it runs
the run's jobs in this process, so the run has finished when it returns. With a cluster
running, it leaves the jobs to the cluster's workers (taking some here would race them)
and waits for the run to end, for ``wait`` seconds at most; a run still going then is
the cluster's, and the demo says so and how to follow it.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError
from django.db import transaction

import jobs
from ingest import conf
from ingest.runs import services
from ingest.runs.models import Hook, HookTemplate, IngestRun, IngestSource
from tenancy.models import Tenant

DEMO = Path(__file__).resolve().parent / "data" / "orders"
SOURCE = "demo-orders"
DEMO_TENANT = "demo"
ENTRY = "check-records"
# A field name, or several separated by commas: nothing else reaches the argument list.
FIELDS = r"^[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*$"
FIELD = r"^[A-Za-z0-9_]+$"
# How long the demo waits for a running cluster to carry the run through, by default,
# and how often it looks.
WAIT_SECONDS = 300
POLL_SECONDS = 0.5


def load(write: Callable[[str], Any], *, actor: Any, wait: float) -> None:
    """Create the demo ingest source and run it once; with a cluster running, wait for
    it at most ``wait`` seconds."""
    source = IngestSource.objects.filter(name=SOURCE, tenant__slug=DEMO_TENANT).first()
    if source is not None and source.runs.exists():
        write("The ingest demo is already loaded.")
        return
    source = source or _source()
    if not 0 <= wait <= 24 * 3600:
        raise CommandError("--wait is a number of seconds from 0 to 86400")
    run = services.start_ingest(source, actor=actor, via="command")
    if jobs.live_workers():
        run = _wait_for_the_cluster(write, run, wait)
        if not run.finished:
            write(
                f"Ingest demo: run {run.pk} of {SOURCE} is still running after "
                f"{wait:g} s; the cluster carries it on. Follow it with "
                f"`manage.py ingest_status {run.pk}`."
            )
            return
    else:
        while jobs.run_until_idle():
            pass
        run = IngestRun.objects.get(pk=run.pk)
    if run.status != IngestRun.Status.SUCCEEDED:
        raise CommandError(f"the demo run {run.pk} {run.status}: {run.failure_reason}")
    write(
        f"Ingest demo: run {run.pk} of {SOURCE} published "
        f"{run.records_published} records in {run.batches_published} batches."
    )


def _wait_for_the_cluster(write: Callable[[str], Any], run: IngestRun, wait: float) -> IngestRun:
    """The run once it ended, or as it stands after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    write(
        f"Ingest demo: run {run.pk} started; a cluster is running, waiting for "
        f"it to finish the run (at most {wait:g} s)."
    )
    while not run.finished and time.monotonic() < deadline:
        time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))
        run = IngestRun.objects.get(pk=run.pk)
    return run


@transaction.atomic
def _source() -> IngestSource:
    roots = conf.get("FILE_ROOTS")
    if not roots or "://" in roots[0]:
        raise CommandError("INGEST_FILE_ROOTS names no local directory for the demo files")
    # A files source reads only its tenant's directory under a root.
    target = Path(roots[0]) / DEMO_TENANT / SOURCE
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(DEMO.glob("*.jsonl")):
        shutil.copyfile(path, target / path.name)
    tenant, _ = Tenant.objects.get_or_create(slug=DEMO_TENANT, defaults={"name": "Demo organisation"})
    source = IngestSource.objects.create(
        tenant=tenant,
        name=SOURCE,
        kind="files",
        batch_size=25,
        max_failures=3,
        config={"url": str(target), "pattern": "*.jsonl", "format": "jsonl"},
    )
    Hook.objects.create(
        source=source,
        name="check-records",
        template=_entry(),
        parameters={"require": "id,amount", "unique": "id"},
    )
    return source


def _entry() -> HookTemplate:
    """The demo's catalogue entry, as a platform operator would define it."""
    entry, _ = HookTemplate.objects.update_or_create(
        name=ENTRY,
        defaults={
            "description": "Every record a JSON object with the required fields; no value of "
            "the unique field twice.",
            "image": "conveyor:latest",
            "command": [
                sys.executable,
                "-m",
                "ingest.hookkit.check_records",
                "--require",
                "{require}",
                "--unique",
                "{unique}",
            ],
            "parameters": [
                {
                    "name": "require",
                    "type": "string",
                    "required": True,
                    "max_length": 500,
                    "pattern": FIELDS,
                    "description": "Fields every record must have.",
                },
                {
                    "name": "unique",
                    "type": "string",
                    "default": "id",
                    "max_length": 100,
                    "pattern": FIELD,
                    "description": "A field no two records share.",
                },
            ],
            "timeout_seconds": 120,
            "enabled": True,
        },
    )
    return entry
