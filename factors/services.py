"""Operations on the CO2 calculator, called alike by the API, the admin and the commands.

Two paths, so that a person editing one entry never waits behind a bulk load:

- interactive: a person creates, edits or deletes one entry. It is validated, its
  emission computed and its module's and report's stats adjusted by the difference, in
  one transaction, and the new stats are returned. No job. (``factors.entry_edits``,
  re-exported here.)
- bulk: uploads, syncs and recalculations. The request validates what it can, stages
  the file and enqueues the first job of a pipeline, in one transaction; the jobs do the
  rest (``factors.handlers``). The response names the job and the pipeline.

Every operation records who asked: ``created_by`` on jobs and reports, ``created_by`` and
``updated_by`` on entries.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, BinaryIO

from django.db import connection, transaction

import jobs
from factors import catalog, csv_schemas, emissions, json_rows, sources, staging, unit_directory
from factors.entry_edits import (
    Actor,
    CleanEntry,
    EntryChange,
    actor_user,
    clean_entry,
    create_entry,
    delete_entry,
    update_entry,
)
from factors.errors import AlreadyRunning, InvalidRequest, UploadRejected
from factors.models import CarbonReport, PipelineModule, ReportModule, Unit, Upload

__all__ = [
    "AlreadyRunning",
    "CleanEntry",
    "Dispatched",
    "EntryChange",
    "InvalidRequest",
    "UploadRejected",
    "clean_entry",
    "create_entry",
    "delete_entry",
    "dispatch_csv",
    "ingest_from_api",
    "open_report",
    "recalculate_emissions",
    "recompute_stats",
    "remove_loads",
    "sync_units",
    "update_entry",
    "upload_factors",
]


@dataclass(frozen=True)
class Dispatched:
    """The first job of a pipeline an operation started (or found already queued)."""

    job: jobs.Job
    rows: int | None = None
    created: bool = True

    @property
    def pipeline_id(self) -> Any:
        return self.job.pipeline_id


# --- keys: what may run together ---------------------------------------------------------------


def ingest_key(module_id: int, data_entry_type: str) -> str:
    """One unfinished ingest per module and type (the module fixes the year)."""
    return f"factors.ingest:module{module_id}:{data_entry_type}"


def recalc_key(data_entry_type: str, module_id: int | None = None) -> str:
    base = f"factors.recalc:{data_entry_type}"
    return base if module_id is None else f"{base}:module{module_id}"


def aggregation_key(module_id: int) -> str:
    return f"factors.aggregation:module{module_id}"


def _tenant_of(module: ReportModule) -> int | None:
    return module.report.unit.tenant_id


# --- reports ---------------------------------------------------------------------------------


@transaction.atomic
def open_report(unit: Unit, year: int, *, actor: Actor = None) -> CarbonReport:
    """The unit's report for ``year``, created with its modules if it does not exist."""
    if not 2000 <= year <= 2100:
        raise InvalidRequest({"year": ["must be between 2000 and 2100"]})
    unit_directory.open_reports([unit.pk], year, created_by=actor)
    return CarbonReport.objects.get(unit=unit, year=year)


# --- the bulk path -------------------------------------------------------------------------------


def dispatch_csv(
    module: ReportModule, data_entry_type: str, source: BinaryIO, *, filename: str = "", actor: Actor = None
) -> Dispatched:
    """Validate an entries CSV for one module and type, stage it and start its pipeline:
    csv_ingest → emission_recalc → aggregation. UploadRejected if any row is bad,
    AlreadyRunning if an ingest for this module and type is unfinished."""
    _check_type(module, data_entry_type)
    report, upload = staging.stage(source, csv_schemas.entries(data_entry_type), filename=filename)
    if upload is None:
        raise UploadRejected(report, filename)
    try:
        return _start_ingest("factors.csv_ingest", module, data_entry_type, actor, upload=upload)
    except BaseException:
        staging.discard(upload)
        raise


def ingest_from_api(
    module: ReportModule, data_entry_type: str, url: str, *, actor: Actor = None
) -> Dispatched:
    """Start an api_ingest pipeline: the job reads ``url`` (JSON), validates it like a CSV
    upload and carries on as csv_ingest does."""
    _check_type(module, data_entry_type)
    problem = sources.check_url(url)
    if problem:
        raise InvalidRequest({"url": [problem]})
    return _start_ingest("factors.api_ingest", module, data_entry_type, actor, url=url)


@transaction.atomic
def _start_ingest(
    job_type: str,
    module: ReportModule,
    data_entry_type: str,
    actor: Actor,
    *,
    upload: staging.StagedUpload | None = None,
    url: str = "",
) -> Dispatched:
    """Enqueue an ingest unless one for this module and type is unfinished.

    The job's unique key decides, in the database: of two requests at the same moment,
    one inserts the job and the other gets the existing one back and is refused. A
    second upload is refused rather than queued: it would replace the first one's rows
    anyway, and the operator should know that the first one is still going. The job
    belongs to the module's tenant, and so does its upload.
    """
    module = ReportModule.objects.select_related("report__unit").get(pk=module.pk)
    key = ingest_key(module.pk, data_entry_type)
    tenant = _tenant_of(module)
    payload: dict[str, Any] = {"module": module.pk, "data_entry_type": data_entry_type}
    if upload is not None:
        payload["upload"] = staging.register(
            upload, Upload.Kind.ENTRIES, tenant_id=tenant, created_by=actor_user(actor)
        )
    else:
        payload["url"] = url
    job, created = jobs.enqueue_once(
        job_type, payload, unique_key=key, concurrency_key=key, tenant=tenant, created_by=actor_user(actor)
    )
    if not created:
        raise AlreadyRunning(
            job,
            f"an ingest of {data_entry_type} entries into {module} is "
            f"already {job.state} (job {job.pk}, pipeline "
            f"{job.pipeline_id}); wait for it to finish, or cancel it, "
            f"then upload again",
        )
    _link(job, [module.pk])
    return Dispatched(job, upload.rows if upload else None)


def upload_factors(
    data_entry_type: str, source: BinaryIO, *, filename: str = "", actor: Actor = None
) -> Dispatched:
    """Validate a factor CSV of one type, stage it and start factor_ingest (which chains
    one emission_recalc of the type when factors changed)."""
    spec = _spec_or_invalid(data_entry_type)
    report, upload = staging.stage(source, csv_schemas.factors(spec.type), filename=filename)
    if upload is None:
        raise UploadRejected(report, filename)
    try:
        return _start_factor_ingest(spec, upload, actor)
    except BaseException:
        staging.discard(upload)
        raise


@transaction.atomic
def _start_factor_ingest(
    spec: catalog.EntryTypeSpec, upload: staging.StagedUpload, actor: Actor
) -> Dispatched:
    key = f"factors.factor_ingest:{spec.type}"
    payload = {
        "data_entry_type": spec.type,
        "upload": staging.register(upload, Upload.Kind.FACTORS, tenant_id=None, created_by=actor_user(actor)),
    }
    job, created = jobs.enqueue_once(
        "factors.factor_ingest", payload, unique_key=key, concurrency_key=key, created_by=actor_user(actor)
    )
    if not created:
        raise AlreadyRunning(
            job,
            f"a factor upload for {spec.type} is already {job.state} "
            f"(job {job.pk}); wait for it to finish, then upload again",
        )
    _link_modules_of(job, spec.module_type)
    return Dispatched(job, upload.rows)


def sync_units(
    year: int,
    *,
    source: BinaryIO | None = None,
    filename: str = "",
    url: str | None = None,
    actor: Actor = None,
) -> Dispatched:
    """Start a unit_sync for ``year`` from a directory file (CSV or JSON) or a JSON URL
    (default: ``FACTORS_UNITS_URL``). One sync per year at a time."""
    if not 2000 <= year <= 2100:
        raise InvalidRequest({"year": ["must be between 2000 and 2100"]})
    if source is not None:
        return _sync_units_from_file(year, source, filename, actor)
    url = url or None
    if url is None:
        raise InvalidRequest(
            {"source": ["give a directory file or a URL (no FACTORS_UNITS_URL is configured)"]}
        )
    problem = sources.check_url(url)
    if problem:
        raise InvalidRequest({"url": [problem]})
    return _start_unit_sync(year, actor, url=url)


def _sync_units_from_file(year: int, source: BinaryIO, filename: str, actor: Actor) -> Dispatched:
    if filename.lower().endswith(".json"):
        try:
            source = io.BytesIO(json_rows.units_csv(sources.read_json(source, "units")))
        except sources.DocumentTooLarge as exc:
            raise InvalidRequest({"file": [str(exc)]}) from exc
        except sources.SourceError as exc:
            raise InvalidRequest({"file": [f"not valid JSON: {exc}"]}) from exc
        except json_rows.ShapeError as exc:
            raise InvalidRequest({"file": exc.errors[:100]}) from exc
    report, upload = staging.stage(source, csv_schemas.units(), filename=filename)
    if upload is None:
        raise UploadRejected(report, filename)
    try:
        return _start_unit_sync(year, actor, upload=upload)
    except BaseException:
        staging.discard(upload)
        raise


@transaction.atomic
def _start_unit_sync(
    year: int, actor: Actor, *, upload: staging.StagedUpload | None = None, url: str = ""
) -> Dispatched:
    key = f"factors.unit_sync:{year}"
    payload: dict[str, Any] = {"year": year}
    if upload is not None:
        payload["upload"] = staging.register(
            upload, Upload.Kind.UNITS, tenant_id=None, created_by=actor_user(actor)
        )
    else:
        payload["url"] = url
    job, created = jobs.enqueue_once(
        "factors.unit_sync", payload, unique_key=key, concurrency_key=key, created_by=actor_user(actor)
    )
    if not created:
        raise AlreadyRunning(job, f"a unit sync for {year} is already {job.state} (job {job.pk})")
    return Dispatched(job, upload.rows if upload else None)


@transaction.atomic
def recalculate_emissions(
    data_entry_type: str, *, year: int | None = None, actor: Actor = None
) -> Dispatched:
    """Start an emission_recalc of every entry of a type (of one year, if given). A
    request for the same scope while one waits to start gets that one (created=False),
    also when requests race: the engine's pending key decides. One asked for while a
    recalculation runs queues exactly one more, as the running one may have read the
    entries before the change that prompted the request."""
    spec = _spec_or_invalid(data_entry_type)
    if year is not None and not 2000 <= year <= 2100:
        raise InvalidRequest({"year": ["must be between 2000 and 2100"]})
    scope = emissions.Scope(spec.type, years=(year,) if year else ())
    key = recalc_key(spec.type)
    queued = jobs.enqueue_once(
        "factors.emission_recalc",
        scope.payload(),
        concurrency_key=key,
        pending_key=f"{key}:years={year or 'all'}",
        created_by=actor_user(actor),
    )
    if queued.created:
        _link_modules_of(queued.job, spec.module_type, year)
    return Dispatched(queued.job, created=queued.created)


def remove_loads(ingest_ids: list[int], *, actor: Actor = None) -> jobs.Job:
    """Queue the removal of these ingests' rows now, without waiting out the abandoned
    loads' age: those replaced, or whose pipeline is over without making them current.
    Current loads and loads an ingest is still writing are kept."""
    return jobs.enqueue(
        "factors.prune_loads", {"loads": sorted(set(ingest_ids))}, created_by=actor_user(actor)
    )


@transaction.atomic
def recompute_stats(report_ids: list[int], *, actor: Actor = None) -> int:
    """Queue an aggregation of every module of these reports (an operator healing stats
    by hand); modules with one already waiting keep that one. Returns how many."""
    modules = ReportModule.objects.filter(report_id__in=report_ids).select_related("report__unit")
    for module in modules:
        job = queue_aggregation(module.pk, tenant=_tenant_of(module), created_by=actor_user(actor))
        _link(job, [module.pk])
    return len(modules)


def queue_aggregation(module_id: int, *, tenant: int | None, **options: Any) -> jobs.Job:
    """Enqueue a module's aggregation, or get the one already waiting (its key is both
    unique and a concurrency key: one waits, one runs). ``options`` go to ``enqueue``."""
    key = aggregation_key(module_id)
    return jobs.enqueue(
        "factors.aggregation",
        {"module": module_id},
        unique_key=key,
        concurrency_key=key,
        tenant=tenant,
        **options,
    )


def _check_type(module: ReportModule, data_entry_type: str) -> None:
    spec = _spec_or_invalid(data_entry_type)
    if spec.module_type != module.module_type:
        raise InvalidRequest(
            {
                "data_entry_type": [
                    f"{data_entry_type} entries belong to the {spec.module_type} module, not "
                    f"{module.module_type}"
                ]
            }
        )


def _spec_or_invalid(data_entry_type: str) -> catalog.EntryTypeSpec:
    try:
        return catalog.spec(data_entry_type)
    except KeyError as exc:
        raise InvalidRequest({"data_entry_type": [str(exc.args[0])]}) from None


def _link(job: jobs.Job, module_ids: list[int]) -> None:
    """Record the modules a pipeline works on (they show "recalculating" meanwhile)."""
    PipelineModule.objects.bulk_create(
        [PipelineModule(pipeline_id=job.pipeline_id, module_id=m, job=job) for m in module_ids],
        ignore_conflicts=True,
    )


def _link_modules_of(job: jobs.Job, module_type: str, year: int | None = None) -> None:
    """Link every module of a module type (of a year), set-based: a factor change can
    touch any of them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO factors_pipelinemodule (pipeline_id, module_id, job_id) "
            "SELECT %(pipeline)s, m.id, %(job)s FROM factors_reportmodule m "
            "JOIN factors_carbonreport r ON r.id = m.report_id "
            "WHERE m.module_type = %(type)s AND (%(year)s::int IS NULL OR r.year = %(year)s) "
            "ON CONFLICT DO NOTHING",
            {"pipeline": job.pipeline_id, "job": job.pk, "type": module_type, "year": year},
        )
