"""The exports' jobs in the cluster:

exports.Reconcile    (started every minute; a pass every RECONCILE_EVERY_SECONDS)
exports.CancelQuery  (a cancelled job's query, cancelled on its engine)
"""

from __future__ import annotations

import time
from typing import Any

import jobs
from exports import conf, engines, reconcile
from exports.models import Engine, ExportJob

# The cron starts one a minute (one at a time: its unique key), and each runs passes 5 s
# apart for just under that minute, so that the reconciliation runs every few seconds
# without a job row, or an event, per pass. A worker shutting down ends it at once.
RECONCILE_WINDOW_SECONDS = 55.0


@jobs.handler(
    "exports.Reconcile",
    max_attempts=1,
    atomic=False,
    timeout=120,
    maintenance=True,
    # Recovers what crashed export workers left, a pass every few seconds (exports/reconcile.py).
    schedule=jobs.Cron("* * * * *", name="exports-reconcile"),
)
def reconcile_exports(ctx: jobs.JobContext) -> dict[str, Any]:
    every = float(conf.get("RECONCILE_EVERY_SECONDS"))
    started, totals = time.monotonic(), reconcile.Pass()
    passes = 0
    while True:
        done = reconcile.reconcile()
        passes += 1
        for name, value in done.as_dict().items():
            setattr(totals, name, getattr(totals, name) + value)
        ctx.progress(passes, None, f"{passes} pass(es)")
        if time.monotonic() - started + every > RECONCILE_WINDOW_SECONDS or ctx.pause(every):
            return {"passes": passes, **totals.as_dict()}


@jobs.handler("exports.CancelQuery", max_attempts=3, backoff=jobs.Fixed(30))
def cancel_query(ctx: jobs.JobContext) -> dict[str, Any]:
    job_id = ctx.payload.get("job")
    job = None
    if isinstance(job_id, int) and ctx.tenant_id is not None:
        job = ExportJob.objects.filter(pk=job_id, tenant_id=ctx.tenant_id).first()
    if job is None:
        raise jobs.PermanentError(f"export job {ctx.payload.get('job')!r} is not one of this job's tenant's")
    if job.engine != Engine.TRINO or not job.query_id:
        return {"cancelled": None}
    engines.trino_engine().cancel(job.query_id, job.starburst_role)
    return {"cancelled": job.query_id}
