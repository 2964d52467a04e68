"""The CO2 calculator's job types: the bulk path, one writer per table.

    csv_ingest / api_ingest  →  emission_recalc  →  aggregation
    (data entries only)         (emissions only)     (stats only, deduplicated)
          └─ emission_recalc of each chunk of rows loaded, while the load goes on
             (``factors.recalc_chunks``; the chained one closes the ingest)
    factor_ingest (factors)  →  emission_recalc of its type  →  aggregation per module
    unit_sync (units, and the year's empty reports)

Long handlers (ingest, recalculation, unit sync) commit in batches (``atomic=False``):
they are idempotent and fenced (``factors.fence``), so a retry after a crash finishes
the work without writing anything twice. The aggregation and the factor upsert are
short and run in the transaction that records their success.

A payload names objects; it does not vouch for them. Every handler finds the module,
upload or scope it works on through its job's tenant (``ctx.tenant_id``), and takes the
year and source from the database rather than the payload; factors and units are the
platform's, so only a platform job (no tenant) may change them. Only the aggregation and
module recalculations are open to API clients (``factors.payloads``).
"""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

from django.db import transaction

import jobs
from factors import (
    aggregation,
    catalog,
    conf,
    csv_schemas,
    emissions,
    entry_ingest,
    entry_loads,
    factor_ingest,
    json_rows,
    payloads,
    queries,
    recalc_chunks,
    services,
    sources,
    staging,
    unit_directory,
)
from factors.models import ReportModule, Upload
from intake.csv_validation import validate

RETRY = jobs.Exponential(base=10, factor=3, cap=600)


def _fetch(url: str) -> Any:
    """A source's JSON; its failures as the engine's outcomes (retry or fail now)."""
    try:
        return sources.fetch_json(url)
    except sources.SourceError as exc:
        raise (jobs.TransientError if exc.transient else jobs.PermanentError)(str(exc)) from exc


# --- what a job may touch ----------------------------------------------------------------------------


def _module(ctx: jobs.JobContext, module_id: Any) -> ReportModule:
    """The module a payload names, if it is one of the job's tenant's."""
    module = queries.tenant_module(module_id, ctx.tenant_id)
    if module is None:
        raise jobs.PermanentError(f"module {module_id!r} does not exist for this job's tenant")
    return module


def _target(ctx: jobs.JobContext, source: str) -> entry_ingest.Target:
    """Where an ingest writes: the payload's module and type, checked against each other;
    the year is the module's report's."""
    module = _module(ctx, ctx.payload.get("module"))
    data_entry_type = str(ctx.payload.get("data_entry_type", ""))
    try:
        spec = catalog.spec(data_entry_type)
    except KeyError:
        raise jobs.PermanentError(f"unknown data-entry type {data_entry_type[:40]!r}") from None
    if spec.module_type != module.module_type:
        raise jobs.PermanentError(f"{data_entry_type} entries do not belong to {module}")
    return entry_ingest.Target(module.pk, data_entry_type, module.report.year, source)


def _upload(ctx: jobs.JobContext, kind: str) -> staging.StagedUpload:
    try:
        return staging.resolve(ctx.payload.get("upload"), kind, tenant_id=ctx.tenant_id)
    except staging.UploadMissing as exc:
        raise jobs.PermanentError(str(exc)) from exc


def _platform_only(ctx: jobs.JobContext) -> None:
    """Factors and units are shared by every tenant: no tenant's job may change them."""
    if ctx.tenant_id is not None:
        raise jobs.PermanentError(
            f"{ctx.job.type} changes data shared by every tenant; only a platform job (no tenant) may run it"
        )


# --- ingest: data entries only -------------------------------------------------------------------


@jobs.handler("factors.csv_ingest", atomic=False, max_attempts=5, backoff=RETRY)
def csv_ingest(ctx: jobs.JobContext) -> dict[str, Any]:
    """Load a staged CSV upload into entries, as a load no reader sees yet; chains the
    module's closing recalculation, which makes the load current in place of the earlier
    CSV entries of the module and type (``factors.entry_loads``)."""
    target = _target(ctx, "csv")
    upload = _upload(ctx, Upload.Kind.ENTRIES)
    result = entry_ingest.load(ctx, target, upload, first_row=2)
    staging.discard(upload)
    _chain_recalc(ctx, target)
    return result.as_dict()


@jobs.handler("factors.api_ingest", atomic=False, max_attempts=5, backoff=RETRY)
def api_ingest(ctx: jobs.JobContext) -> dict[str, Any]:
    """Read entries from an HTTP JSON source, validate them as a CSV upload would be, and
    load them like csv_ingest (row number = position in the source, from 1)."""
    target = _target(ctx, "api")
    upload = _staged_api_entries(ctx, target)
    try:
        # A source can change between attempts: an earlier attempt's rows go, all load.
        entry_ingest.forget_partial(ctx, target)
        result = entry_ingest.load(ctx, target, upload, first_row=1)
    finally:
        staging.discard(upload)  # a retry reads the source again
    _chain_recalc(ctx, target)
    return {**result.as_dict(), "url": ctx.payload["url"]}


def _staged_api_entries(ctx: jobs.JobContext, target: entry_ingest.Target) -> staging.StagedUpload:
    """The source's entries, validated and staged (before any write: a bad document
    fails the job and writes nothing)."""
    document = _fetch(ctx.payload["url"])
    try:
        body = json_rows.entries_csv(document, target.data_entry_type)
    except json_rows.ShapeError as exc:
        raise jobs.PermanentError(f"{ctx.payload['url']}: {exc}") from exc
    report, upload = staging.stage(io.BytesIO(body), csv_schemas.entries(target.data_entry_type))
    if upload is None:
        errors = "; ".join(json_rows.describe(e, "entries") for e in report.errors[:20])
        raise jobs.PermanentError(f"{report.error_count} invalid entries, nothing written: {errors}")
    return upload


def _chain_recalc(ctx: jobs.JobContext, target: entry_ingest.Target) -> None:
    """Chain the recalculation that closes the ingest: it covers what the chunks queued
    during the load did not, makes the load current, then aggregates
    (``factors.recalc_chunks``, ``factors.entry_loads``)."""
    scope = emissions.Scope(target.data_entry_type, module_id=target.module_id)
    ctx.chain(
        "factors.emission_recalc",
        recalc_chunks.closing_payload(scope, ctx.job),
        concurrency_key=services.recalc_key(target.data_entry_type, target.module_id),
        after=recalc_chunks.chunk_jobs(ctx.job.pk),
    )


# --- recalculation: emissions only ---------------------------------------------------------------


@jobs.handler(
    "factors.emission_recalc",
    atomic=False,
    max_attempts=5,
    backoff=RETRY,
    api_payload=payloads.RecalculationPayload,
)
def emission_recalc(ctx: jobs.JobContext) -> dict[str, Any]:
    """Recompute the emissions of a scope; chains one aggregation per module touched
    (deduplicated: N recalculations of one module waiting together make one), except
    for a chunk of an ingest still loading: the ingest's closing recalculation will."""
    scope = emissions.Scope.from_payload(ctx.payload)
    if scope.module_id is not None:
        _module(ctx, scope.module_id)
    elif ctx.tenant_id is not None:
        raise jobs.PermanentError("a tenant's recalculation covers one of its modules; name it")
    closes = int(ctx.payload["closes"]) if "closes" in ctx.payload else None
    if closes is not None:
        scope = recalc_chunks.closing_scope(ctx, scope)
    result = emissions.recalculate(scope, ctx)
    if "chunk_of" in ctx.payload:
        return {"scope": scope.describe(), "chunk_of": ctx.payload["chunk_of"], **result.as_dict()}
    tenants = dict(
        ReportModule.objects.filter(pk__in=result.modules).values_list("pk", "report__unit__tenant_id")
    )
    if closes is not None:
        # The switch queues the module's aggregation in its own transaction.
        switch = entry_loads.make_current(
            ctx,
            closes,
            module_id=scope.module_id,
            on_switch=lambda module_id: _aggregate_soon(ctx, module_id, tenants.get(module_id)),
        )
        return {"scope": scope.describe(), **result.as_dict(), **switch.as_dict()}
    for module_id in sorted(tenants):
        key = services.aggregation_key(module_id)
        ctx.chain(
            "factors.aggregation",
            {"module": module_id},
            unique_key=key,
            concurrency_key=key,
            tenant=tenants[module_id],
        )
    return {"scope": scope.describe(), **result.as_dict()}


def _aggregate_soon(ctx: jobs.JobContext, module_id: int, tenant: int | None) -> None:
    """Queue a module's aggregation now, in the caller's transaction, in this job's
    pipeline (not as its child: it must run even if this job fails later)."""
    services.queue_aggregation(
        module_id, tenant=tenant, pipeline=ctx.job.pipeline_id, created_by=ctx.job.created_by_id
    )


# --- aggregation: stats only -----------------------------------------------------------------------


@jobs.handler("factors.aggregation", max_attempts=5, backoff=RETRY, api_payload=payloads.AggregationPayload)
def aggregate(ctx: jobs.JobContext) -> dict[str, Any]:
    """Recompute one module's stats and its report's, in the job's own transaction."""
    module = queries.tenant_module(ctx.payload.get("module"), ctx.tenant_id)
    if module is None:
        # Deleted since it was queued (or never this tenant's): nothing to aggregate.
        return {"module": ctx.payload.get("module"), "skipped": "the module no longer exists"}
    return aggregation.recompute_module(module.pk, job_id=ctx.job.pk)


# --- retention ----------------------------------------------------------------------------------


@jobs.handler(
    "factors.prune_loads",
    queue="maintenance",
    max_attempts=3,
    atomic=False,
    maintenance=True,
    schedule=jobs.Cron("47 * * * *", name="prune-entry-loads"),
)
def prune_loads(ctx: jobs.JobContext) -> dict[str, Any]:
    """Delete the rows of ingests nobody will read (scheduled hourly; an operator's
    admin action names loads and removes them without waiting out their age)."""
    _platform_only(ctx)
    only = ctx.payload.get("loads")
    if only is not None:
        if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
            raise jobs.PermanentError("loads: a list of ingest job ids")
        return entry_loads.prune(older_than=timedelta(0), only=only).as_dict()
    return entry_loads.prune(older_than=conf.abandoned_load_age()).as_dict()


# --- factors and units ------------------------------------------------------------------------------


@jobs.handler("factors.factor_ingest", max_attempts=3, backoff=RETRY)
def factor_ingest_job(ctx: jobs.JobContext) -> dict[str, Any]:
    """Upsert a staged factor upload in place and mark the factors it leaves out stale;
    chains the type's recalculation when a factor was added or changed value."""
    _platform_only(ctx)
    data_entry_type = str(ctx.payload.get("data_entry_type", ""))
    if data_entry_type not in catalog.DataEntryType.values:
        raise jobs.PermanentError(f"unknown data-entry type {data_entry_type[:40]!r}")
    upload = _upload(ctx, Upload.Kind.FACTORS)
    result = factor_ingest.upsert(ctx.job, data_entry_type, upload)
    if result["inserted"] or result["value_changed"]:
        scope = emissions.Scope(data_entry_type, years=tuple(result["years"]))
        ctx.chain(
            "factors.emission_recalc", scope.payload(), concurrency_key=services.recalc_key(data_entry_type)
        )
    # Deleted only once the transaction commits: a rolled-back attempt must find it.
    transaction.on_commit(lambda: staging.discard(upload))
    return result


@jobs.handler("factors.unit_sync", atomic=False, max_attempts=5, backoff=RETRY)
def unit_sync(ctx: jobs.JobContext) -> dict[str, Any]:
    """Apply a unit directory for one year: from a staged file, or fetched from a JSON
    endpoint (outside any transaction), then written in one transaction."""
    _platform_only(ctx)
    year = int(ctx.payload["year"])
    if "url" in ctx.payload:
        rows = _directory_from_url(ctx.payload["url"])
        upload = None
    else:
        upload = _upload(ctx, Upload.Kind.UNITS)
        with upload.open() as handle:
            rows = unit_directory.read_rows(handle, upload.columns)
    result = unit_directory.apply(rows, year, ctx)
    if upload is not None:
        staging.discard(upload)
    return result


def _directory_from_url(url: str) -> list[unit_directory.UnitRow]:
    document = _fetch(url)
    try:
        body = json_rows.units_csv(document)
    except json_rows.ShapeError as exc:
        raise jobs.PermanentError(f"{url}: {exc}") from exc
    out = io.BytesIO()
    report = validate(io.BytesIO(body), csv_schemas.units(), out=out)
    if not report.ok:
        errors = "; ".join(json_rows.describe(e, "units") for e in report.errors[:20])
        raise jobs.PermanentError(f"{report.error_count} invalid units, nothing written: {errors}")
    out.seek(0)
    return unit_directory.read_rows(out, tuple(report.header))
