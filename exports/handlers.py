"""The exports' jobs:

exports.export       (one per export, run by remote export workers: exports/services.py)
exports.Reconcile    (one pass a minute, then it ends: exports/reconcile.py)
exports.CancelQuery  (a cancelled export's query, cancelled on its engine)
"""

from __future__ import annotations

from typing import Any

import jobs
from exports import engines, reconcile, services
from exports.models import Engine, ExportJob

# Claimed only by export workers through the engine's remote-worker API. An attempt
# fails for good when its export says so (a query the engine refused); one a worker
# lost (killed, or cut off for a whole lease) is tried again, at most three times. A
# claim's lease is short so that a cancel reaches the export within seconds; its time
# limit is the operators' maximum duration (services.time_limit).
jobs.remote_handler(
    services.EXPORT_TYPE,
    queue=services.QUEUE,
    max_attempts=3,
    lease=services.LEASE_SECONDS,
    hooks=services.HOOKS,
)


@jobs.handler(
    "exports.Reconcile",
    max_attempts=1,
    atomic=False,
    timeout=120,
    maintenance=True,
    schedule=jobs.Cron("* * * * *", name="exports-reconcile"),
)
def reconcile_exports(ctx: jobs.JobContext) -> dict[str, Any]:
    """One pass, then the job ends: no worker slot is held between passes."""
    return reconcile.reconcile().as_dict()


@jobs.handler("exports.CancelQuery", max_attempts=3, backoff=jobs.Fixed(30))
def cancel_query(ctx: jobs.JobContext) -> dict[str, Any]:
    job_id = ctx.payload.get("job")
    job = None
    if isinstance(job_id, int) and ctx.tenant_id is not None:
        job = ExportJob.objects.filter(pk=job_id, tenant_id=ctx.tenant_id).first()
    if job is None:
        raise jobs.PermanentError(f"export job {ctx.payload.get('job')!r} is not one of this job's tenant's")
    # The query named when it was enqueued (the export may have been reset since), else
    # the export's current one.
    query = ctx.payload.get("query") or job.query_id
    if job.engine != Engine.TRINO or not isinstance(query, str) or not query:
        return {"cancelled": None}
    engines.trino_engine().cancel(query, job.starburst_role)
    return {"cancelled": query}
