"""Units, carbon reports and their modules, data entries, emission factors, emissions.

Who writes what (the bulk path's "one writer per table"):

- data entries: ``csv_ingest`` and ``api_ingest``, and the interactive path;
- emissions: ``emission_recalc``, and the interactive path for the entry it edits;
- stats of modules and reports: ``aggregation``, and the interactive path by deltas;
- emission factors: ``factor_ingest``; units: ``unit_sync``.

The interactive path (one person editing one entry) computes inline; everything bulk is
a job. Columns that name a job (``job``, ``last_seen_job`` …) are provenance: jobs are
pruned after their retention, and the id of the job that wrote a row must outlive it,
so those foreign keys carry no database constraint and delete nothing.

The three references on the bulk tables' hot path (entry → module, emission → entry,
emission → factor) are foreign keys checked once per statement instead of once per row:
a plain FOREIGN KEY runs one lookup and one row lock per inserted row, which measured
more than half of the time of a bulk load. Migration 0002 declares them as triggers
that do the same thing set-based: lock the referenced rows ``FOR KEY SHARE`` (each
distinct one once) and refuse the statement if any is missing; refuse deleting a module
that has entries or a factor that has emissions; delete an entry's emission with it.
The guarantees are a foreign key's, for any SQL, under READ COMMITTED.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Func, Q, Value
from django.db.models.functions import Now
from django.db.models.lookups import Exact
from django.utils import timezone

from factors import stats
from factors.catalog import DataEntryType, ModuleType

YEAR_RANGE = Q(year__gte=2000, year__lte=2100)


def _provenance(verbose_name: str, help_text: str) -> models.ForeignKey:
    """A link to the job that wrote a row, kept as a plain id once the job is pruned."""
    return models.ForeignKey(
        "jobs.Job",
        verbose_name=verbose_name,
        help_text=help_text,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="+",
    )


def _is_object(field: str) -> Exact:
    return Exact(Func(F(field), function="jsonb_typeof", output_field=models.CharField()), Value("object"))


class Unit(models.Model):
    """An organisational unit (a lab, a department), as listed by the unit directory."""

    code = models.CharField(
        "code", max_length=64, unique=True, help_text="The unit's identifier in the organisation directory."
    )
    name = models.CharField("name", max_length=200)
    parent = models.ForeignKey(
        "self",
        verbose_name="parent unit",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="children",
    )
    tenant = models.ForeignKey(
        "tenancy.Tenant",
        verbose_name="tenant",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The organisation whose members see this unit's reports.",
    )
    last_synced_job = _provenance("last synced by", "The unit sync that last listed this unit.")
    last_synced_year = models.PositiveSmallIntegerField(
        "last synced year",
        null=True,
        blank=True,
        help_text="The reporting year of the directory that last listed this unit.",
    )
    created_at = models.DateTimeField("created", auto_now_add=True)
    updated_at = models.DateTimeField("updated", auto_now=True)

    class Meta:
        permissions = [("operate_unit", "Can sync units")]
        ordering = ["code"]
        constraints = [models.CheckConstraint(name="factors_unit_code_not_empty", condition=~Q(code=""))]

    def __str__(self) -> str:
        return f"{self.code} {self.name}"


class CarbonReport(models.Model):
    """One unit's carbon report for one year, with its totals."""

    unit = models.ForeignKey(Unit, verbose_name="unit", on_delete=models.PROTECT, related_name="reports")
    year = models.PositiveSmallIntegerField("year")
    stats = models.JSONField(
        "stats",
        default=stats.empty_report_stats,
        help_text="Totals by module and data-entry type; written by the aggregation job and "
        "by interactive edits.",
    )
    stats_updated_at = models.DateTimeField("stats updated", null=True, blank=True)
    created_at = models.DateTimeField("created", auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="opened by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        permissions = [("operate_carbonreport", "Can recompute report stats")]
        ordering = ["-year", "unit__code"]
        constraints = [
            models.UniqueConstraint(fields=["unit", "year"], name="factors_report_one_per_unit_and_year"),
            models.CheckConstraint(name="factors_report_year_in_range", condition=YEAR_RANGE),
        ]

    def __str__(self) -> str:
        return f"{self.unit.code} {self.year}"


class ReportModule(models.Model):
    """One module (travel, energy, purchases) of a report, with its totals."""

    report = models.ForeignKey(
        CarbonReport, verbose_name="report", on_delete=models.CASCADE, related_name="modules"
    )
    module_type = models.CharField("module", max_length=20, choices=ModuleType.choices)
    stats = models.JSONField(
        "stats",
        default=stats.empty_module_stats,
        help_text="Totals by data-entry type; written by the aggregation job and by interactive edits.",
    )
    stats_updated_at = models.DateTimeField("stats updated", null=True, blank=True)
    stats_job = _provenance("aggregated by", "The aggregation job that last recomputed the stats.")

    class Meta:
        ordering = ["report", "module_type"]
        constraints = [
            models.UniqueConstraint(fields=["report", "module_type"], name="factors_module_one_per_type"),
            models.CheckConstraint(
                name="factors_module_type_valid", condition=Q(module_type__in=ModuleType.values)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.report} {self.get_module_type_display()}"


class DataEntryQuerySet(models.QuerySet["DataEntry"]):
    def current(self) -> DataEntryQuerySet:
        """The entries readers see: manual ones, and bulk ones of a current load (see
        ``EntryLoad``); rows of a load still in progress, abandoned or replaced are left out."""
        loads = EntryLoad.objects.filter(state=EntryLoad.State.CURRENT).values("job_id")
        return self.filter(Q(job__isnull=True) | Q(job_id__in=loads))


class DataEntry(models.Model):
    """One reported activity: a quantity of a data-entry type, classified."""

    class Source(models.TextChoices):
        MANUAL = "manual", "Manual"
        CSV = "csv", "CSV upload"
        API = "api", "API source"

    id = models.BigAutoField(primary_key=True)
    # Indexed by factors_entry_module_type_idx (its first column). Checked per statement by
    # migration 0002's trigger rather than per row (see the module docstring).
    module = models.ForeignKey(
        ReportModule,
        verbose_name="module",
        on_delete=models.CASCADE,
        related_name="entries",
        db_index=False,
        db_constraint=False,
    )
    data_entry_type = models.CharField("type", max_length=20, choices=DataEntryType.choices)
    year = models.PositiveSmallIntegerField(
        "year", help_text="The report's year, copied so that factors join without the report."
    )
    quantity = models.DecimalField("quantity", max_digits=18, decimal_places=6)
    unit = models.CharField("unit", max_length=10, help_text="Unit of measure: km, kwh, eur.")
    classification = models.JSONField(
        "classification",
        help_text='The keys that pick the emission factor, e.g. {"haul": "short", "cabin": "economy"}.',
    )
    source = models.CharField("source", max_length=10, choices=Source.choices)
    job = _provenance("written by job", "The ingest job that wrote this entry (bulk entries).")
    row_number = models.PositiveIntegerField(
        "row",
        null=True,
        blank=True,
        help_text="The row of the uploaded file (the header is row 1), or the position in the API source.",
    )
    # Who edited a manual entry, as provenance: no database constraint, because a foreign
    # key fires a check per inserted row even when the column is empty (bulk rows), and
    # that measured a sixth of a bulk load. Deleting a user through Django empties them.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="created by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="last edited by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    # Bulk rows take the loading transaction's time from the database (a COPY sends two
    # fewer columns per row); edits set both from the application's clock.
    created_at = models.DateTimeField("created", db_default=Now())
    updated_at = models.DateTimeField("updated", db_default=Now())

    objects = DataEntryQuerySet.as_manager()

    class Meta:
        permissions = [("operate_dataentry", "Can upload data entries")]
        verbose_name_plural = "data entries"
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(name="factors_entry_quantity_nonnegative", condition=Q(quantity__gte=0)),
            models.CheckConstraint(
                name="factors_entry_type_valid", condition=Q(data_entry_type__in=DataEntryType.values)
            ),
            models.CheckConstraint(name="factors_entry_year_in_range", condition=YEAR_RANGE),
            models.CheckConstraint(
                name="factors_entry_classification_is_object", condition=_is_object("classification")
            ),
            # Bulk entries always name their job and row (exactly-once rests on it);
            # manual ones never do.
            models.CheckConstraint(
                name="factors_entry_provenance",
                condition=Q(source="manual", job__isnull=True, row_number__isnull=True)
                | Q(source__in=["csv", "api"], job__isnull=False, row_number__isnull=False),
            ),
        ]
        indexes = [
            # A module's entries of one type, in id order: the entry listing, the ingest's
            # replace and resume, the module-scoped recalculation's batches, aggregation.
            # Partial on a condition every column is known to meet, so that only a query
            # naming a module can use it: a lookup by id alone (the reference triggers'
            # "id = ANY(…)") must never scan this index once per id, which the planner
            # chose when statistics said the table was empty (migration 0005).
            models.Index(
                fields=["module", "data_entry_type", "id"],
                name="factors_entry_module_type_idx",
                condition=Q(module__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.data_entry_type} {self.quantity} {self.unit}"


class EntryLoad(models.Model):
    """The rows one bulk ingest wrote, and whether readers see them.

    A bulk entry names the ingest job that wrote it; this row, keyed by that job, says
    whether its rows are read. A load is *loading* while its ingest writes and until its
    closing recalculation has priced every row; it then becomes *current* in one
    transaction that also marks the module's previous load of the same type and source
    *replaced*. Readers see manual entries and the rows of current loads only
    (``DataEntry.objects.current()``), so an ingest killed, failed or cancelled at any
    point is never half-read: its rows stay out of sight until retention deletes them
    (``factors.entry_loads``).
    """

    class State(models.TextChoices):
        LOADING = "loading", "Loading (not read)"
        CURRENT = "current", "Current"
        REPLACED = "replaced", "Replaced (not read)"

    job = models.OneToOneField(
        "jobs.Job",
        verbose_name="ingest job",
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        help_text="The ingest that wrote the rows; kept as a plain id once the job is pruned.",
    )
    module = models.ForeignKey(
        ReportModule, verbose_name="module", on_delete=models.CASCADE, related_name="+"
    )
    data_entry_type = models.CharField("type", max_length=20, choices=DataEntryType.choices)
    source = models.CharField(
        "source",
        max_length=10,
        choices=[
            (DataEntry.Source.CSV, DataEntry.Source.CSV.label),
            (DataEntry.Source.API, DataEntry.Source.API.label),
        ],
    )
    state = models.CharField("state", max_length=10, choices=State.choices, default=State.LOADING)
    created_at = models.DateTimeField("started", default=timezone.now)
    current_since = models.DateTimeField("current since", null=True, blank=True)
    replaced_at = models.DateTimeField("replaced", null=True, blank=True)

    class Meta:
        permissions = [("operate_entryload", "Can remove entry loads")]
        ordering = ["-job_id"]
        constraints = [
            # What makes a re-upload a replacement: one load read per module, type and
            # source. Also the index of the switch's "which load is current here".
            models.UniqueConstraint(
                fields=["module", "data_entry_type", "source"],
                condition=Q(state="current"),
                name="factors_load_one_current",
            ),
            models.CheckConstraint(
                name="factors_load_state_valid", condition=Q(state__in=["loading", "current", "replaced"])
            ),
            models.CheckConstraint(name="factors_load_source_bulk", condition=Q(source__in=["csv", "api"])),
            models.CheckConstraint(
                name="factors_load_type_valid", condition=Q(data_entry_type__in=DataEntryType.values)
            ),
            models.CheckConstraint(
                name="factors_load_dates_follow_state",
                condition=Q(state="loading", current_since__isnull=True)
                | Q(state="current", current_since__isnull=False, replaced_at__isnull=True)
                # A replaced load may never have been current: a later upload's load
                # was made current first (the latest upload wins).
                | Q(state="replaced", replaced_at__isnull=False),
            ),
        ]
        indexes = [
            # Retention's scan: what is not current.
            models.Index(
                fields=["created_at"], name="factors_load_not_current_idx", condition=~Q(state="current")
            ),
        ]

    def __str__(self) -> str:
        return f"load of job {self.job_id} ({self.get_state_display()})"


class LoadChunk(models.Model):
    """A run of a load's rows whose emissions a recalculation job computes while the load
    goes on: the entries with ``after < id <= upto`` (ids of the entries' sequence).

    Written in the transaction of the batch that completes the chunk, with its job, so a
    crash loses or doubles neither. The next attempt of the ingest starts its first chunk
    where the last one ended, and the ingest's closing recalculation waits for every
    chunk's job (``factors.recalc_chunks``).
    """

    load = models.ForeignKey(EntryLoad, verbose_name="load", on_delete=models.CASCADE, related_name="chunks")
    job = models.OneToOneField(
        "jobs.Job",
        verbose_name="recalculation",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        help_text="The job pricing the chunk; kept as a plain id once the job is pruned.",
    )
    after = models.BigIntegerField("after id")
    upto = models.BigIntegerField("up to id")

    class Meta:
        ordering = ["load", "after"]
        constraints = [
            models.CheckConstraint(name="factors_chunk_not_empty", condition=Q(upto__gt=F("after"))),
            # Chunks of a load are contiguous and disjoint: one starts where one ended.
            models.UniqueConstraint(fields=["load", "after"], name="factors_chunk_one_per_start"),
        ]

    def __str__(self) -> str:
        return f"ids {self.after + 1}..{self.upto} of job {self.load_id}"


class EmissionFactorQuerySet(models.QuerySet["EmissionFactor"]):
    def stale(self) -> EmissionFactorQuerySet:
        return self.filter(is_stale=True)


class EmissionFactor(models.Model):
    """kg CO2e per unit of a data-entry type, for one year and classification."""

    data_entry_type = models.CharField("type", max_length=20, choices=DataEntryType.choices)
    year = models.PositiveSmallIntegerField("year")
    classification = models.JSONField(
        "classification",
        help_text="JSONB: key order never matters, so re-uploading a factor "
        "with its keys in another order updates the same row.",
    )
    value = models.DecimalField("kg CO2e per unit", max_digits=18, decimal_places=9)
    unit = models.CharField("per unit", max_length=10)
    source = models.CharField(
        "source", max_length=200, blank=True, help_text="Publisher and edition, e.g. ADEME Base Carbone 23."
    )
    last_seen_job = _provenance("last seen in upload", "The factor upload of its type that last listed it.")
    is_stale = models.BooleanField(
        "stale",
        default=False,
        help_text="Not in the latest upload of its type that covered its year: kept, with its "
        "id, so the entries computed with it stay linked.",
    )
    created_at = models.DateTimeField("created")
    updated_at = models.DateTimeField("updated")

    objects = EmissionFactorQuerySet.as_manager()

    class Meta:
        permissions = [("operate_emissionfactor", "Can upload factors and recalculate emissions")]
        ordering = ["data_entry_type", "-year", "id"]
        constraints = [
            # One factor per key. JSONB equality ignores key order, so {"a":1,"b":2} and
            # {"b":2,"a":1} collide here. The recalculation joins on it.
            models.UniqueConstraint(
                fields=["data_entry_type", "year", "classification"], name="factors_factor_one_per_key"
            ),
            models.CheckConstraint(name="factors_factor_value_nonnegative", condition=Q(value__gte=0)),
            models.CheckConstraint(name="factors_factor_year_in_range", condition=YEAR_RANGE),
            models.CheckConstraint(
                name="factors_factor_type_valid", condition=Q(data_entry_type__in=DataEntryType.values)
            ),
            models.CheckConstraint(
                name="factors_factor_classification_is_object", condition=_is_object("classification")
            ),
        ]

    def __str__(self) -> str:
        keys = ", ".join(f"{k}={v}" for k, v in sorted(self.classification.items()))
        return f"{self.data_entry_type} {self.year} ({keys})"


class Emission(models.Model):
    """The emission of one data entry, computed with one factor."""

    # Both references are checked per statement by migration 0002's triggers (see the
    # module docstring); deleting an entry deletes its emission there too.
    data_entry = models.OneToOneField(
        DataEntry,
        verbose_name="data entry",
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="emission",
        db_constraint=False,
    )
    factor = models.ForeignKey(
        EmissionFactor,
        verbose_name="factor",
        on_delete=models.PROTECT,
        related_name="emissions",
        db_index=False,
        db_constraint=False,
    )
    kg_co2e = models.DecimalField("kg CO2e", max_digits=20, decimal_places=6)
    job = _provenance(
        "computed by job", "The recalculation that computed it; empty when an interactive edit did."
    )
    computed_at = models.DateTimeField("computed")

    class Meta:
        constraints = [
            models.CheckConstraint(name="factors_emission_nonnegative", condition=Q(kg_co2e__gte=0)),
        ]

    def __str__(self) -> str:
        return f"{self.kg_co2e} kg CO2e (entry #{self.data_entry_id})"


class PipelineModule(models.Model):
    """A module that a pipeline works on. While any job of the pipeline is pending or
    running, the module shows "recalculating" (``factors.queries``)."""

    pipeline_id = models.UUIDField("pipeline", default=uuid.uuid4)
    module = models.ForeignKey(
        ReportModule, verbose_name="module", on_delete=models.CASCADE, related_name="+"
    )
    job = models.ForeignKey(
        "jobs.Job",
        verbose_name="first job",
        on_delete=models.CASCADE,
        related_name="+",
        help_text="The pipeline's first job: the link is pruned with it.",
    )

    class Meta:
        constraints = [
            # Also the index of "which pipelines touch this module".
            models.UniqueConstraint(fields=["module", "pipeline_id"], name="factors_pipeline_module_once"),
        ]

    def __str__(self) -> str:
        return f"{self.pipeline_id} → module {self.module_id}"


class Upload(models.Model):
    """A validated file waiting for the job that ingests it.

    Jobs name an upload by its id only. Where its rows are, which columns they hold and
    whose they are is kept here, on the server: a payload can never point a job at a
    path on disk, at a column list of its own, or at another tenant's file.
    """

    class Kind(models.TextChoices):
        ENTRIES = "entries", "Data entries"
        FACTORS = "factors", "Emission factors"
        UNITS = "units", "Unit directory"

    id = models.UUIDField(primary_key=True, editable=False)
    kind = models.CharField("kind", max_length=10, choices=Kind.choices)
    tenant = models.ForeignKey(
        "tenancy.Tenant",
        verbose_name="tenant",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="Whose data it is; empty for platform files (factors, units).",
    )
    rows = models.PositiveIntegerField("rows")
    columns = models.JSONField("columns", help_text="The staged rows' columns, in file order.")
    filename = models.CharField("file name", max_length=200, blank=True)
    created_at = models.DateTimeField("uploaded", default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="uploaded by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                name="factors_upload_kind_valid", condition=Q(kind__in=["entries", "factors", "units"])
            ),
            models.CheckConstraint(
                name="factors_upload_columns_are_a_list",
                condition=Exact(
                    Func(F("columns"), function="jsonb_typeof", output_field=models.CharField()),
                    Value("array"),
                ),
            ),
            # Entries belong to a module, so to its tenant; factors and units are global.
            models.CheckConstraint(
                name="factors_upload_platform_files_have_no_tenant",
                condition=Q(kind="entries") | Q(tenant__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.filename or self.pk} ({self.rows} rows)"
