"""Snapshots of a tenant's data as Parquet files, and the export jobs that write them.

A ``Mapping`` names what a snapshot holds: its ``MappingEntity`` rows, nodes and edges,
each either one of Conveyor's own datasets (exported from the app's PostgreSQL, filtered
to the tenant) or a SQL query run on Trino/Starburst. Creating a ``Snapshot`` from a
mapping writes one ``ExportJob`` per entity, nodes before edges, each carrying its SQL,
columns, role and destination, so that a worker needs nothing else.

Which Trino role a tenant's queries run under, and which catalogs they may read, is a
``TrinoBinding`` that platform operators keep: never the tenant's choice, since every
tenant's queries go to one shared Trino user.

Each ``ExportJob`` is the domain row of one engine job (``exports.export`` on the
``exports`` queue), which a remote export worker claims through the engine: the claim,
lease, heartbeats, attempts, rescue and the operators' actions are the engine's, and
the engine's steps keep this row in step (``exports.services``, the type's hooks). A
row goes ``pending → claimed → submitted → completed | failed``; ``submitted`` only on
the server-side UNLOAD path, whose polls are the engine job's snoozes on a Fibonacci
schedule, recorded here in ``next_poll_at`` and ``poll_count``. ``generation`` counts
the claims and names each claim's files, so that a late writer from a lost claim never
writes over the current one's. ``ExportEvent`` is the row's domain history (what was
submitted, written or cancelled, and by whom); the engine job's history has the rest.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

import jobs


class EntityKind(models.TextChoices):
    NODE = "node", "node"
    EDGE = "edge", "edge"


class Engine(models.TextChoices):
    POSTGRES = "postgres", "PostgreSQL (Conveyor's own data)"
    TRINO = "trino", "Trino / Starburst"


class Mapping(models.Model):
    """A named set of entity definitions a tenant takes snapshots of."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )  # the unique key leads with it
    name = models.SlugField("name", max_length=100, help_text="Unique within the tenant.")
    description = models.TextField("description", blank=True)
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="exports_mapping_name_per_tenant"),
            models.CheckConstraint(name="exports_mapping_name_not_empty", condition=~Q(name="")),
        ]

    def __str__(self) -> str:
        return self.name


class TrinoBinding(models.Model):
    """The Trino identity a tenant's export queries run under: its role and the catalogs
    its entities may read. Kept by platform operators; a tenant without one exports only
    Conveyor's own datasets."""

    tenant = models.OneToOneField(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.CASCADE, related_name="+"
    )
    role = models.CharField(
        "Starburst role",
        max_length=200,
        help_text="The role (X-Trino-Role) and use case ID (X-Use-Case-Id) of every query of "
        "this tenant's snapshots.",
    )
    catalogs = models.JSONField(
        "allowed catalogs",
        default=list,
        blank=True,
        help_text="The catalogs this tenant's entities may run in and name in their queries.",
    )
    updated_at = models.DateTimeField("updated", auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="updated by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        verbose_name = "Trino binding"
        ordering = ["tenant"]
        constraints = [
            models.CheckConstraint(name="exports_binding_role_not_empty", condition=~Q(role="")),
        ]

    def __str__(self) -> str:
        return f"Trino binding of {self.tenant}"

    def allows(self, catalog: str) -> bool:
        return isinstance(self.catalogs, list) and catalog in self.catalogs


class MappingEntity(models.Model):
    """One node or edge of a mapping: a Conveyor dataset or a Trino query, and the columns
    its Parquet files have, in this order."""

    mapping = models.ForeignKey(
        Mapping, on_delete=models.CASCADE, related_name="entities", db_index=False
    )  # the unique key leads with it
    kind = models.CharField("kind", max_length=4, choices=EntityKind.choices)
    name = models.CharField(
        "name", max_length=100, help_text="The node label or edge type; names the files' folder."
    )
    position = models.PositiveSmallIntegerField(
        "position", default=0, help_text="Order among the entities of its kind."
    )
    dataset = models.CharField(
        "dataset",
        max_length=100,
        blank=True,
        help_text="One of Conveyor's datasets (exported from its own PostgreSQL, the tenant's rows only).",
    )
    sql = models.TextField("SQL", blank=True, help_text="A query run on Trino/Starburst.")
    catalog = models.CharField(
        "catalog", max_length=100, blank=True, help_text="The Trino catalog the query runs in."
    )
    columns = models.JSONField(
        "columns", default=list, help_text="Column names in the order the Parquet files have them."
    )

    class Meta:
        ordering = ["mapping", "kind", "position", "id"]
        verbose_name_plural = "mapping entities"
        constraints = [
            models.UniqueConstraint(fields=["mapping", "kind", "name"], name="exports_entity_name_per_kind"),
            models.CheckConstraint(name="exports_entity_kind_valid", condition=Q(kind__in=EntityKind.values)),
            # A dataset or a query, never both and never neither.
            models.CheckConstraint(
                name="exports_entity_dataset_xor_sql",
                condition=(Q(dataset="") & ~Q(sql="")) | (~Q(dataset="") & Q(sql="")),
            ),
            models.CheckConstraint(
                name="exports_entity_name_safe",
                condition=Q(name__regex=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class SnapshotStatus(models.TextChoices):
    PENDING = "pending", "pending"
    CREATING = "creating", "creating"
    READY = "ready", "ready"
    FAILED = "failed", "failed"


SNAPSHOT_FINISHED = [SnapshotStatus.READY, SnapshotStatus.FAILED]


class Snapshot(models.Model):
    """A consistent export of a mapping's entities; ``ready`` once every job completed."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+"
    )
    mapping = models.ForeignKey(Mapping, on_delete=models.PROTECT, related_name="snapshots")
    status = models.CharField(
        "status", max_length=10, choices=SnapshotStatus.choices, default=SnapshotStatus.PENDING
    )
    node_counts = models.JSONField("node rows", default=dict, blank=True)
    edge_counts = models.JSONField("edge rows", default=dict, blank=True)
    size_bytes = models.BigIntegerField("size (bytes)", null=True, blank=True)
    error = models.TextField("error", blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="created by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField("created")
    updated_at = models.DateTimeField("updated")
    finished_at = models.DateTimeField("finished", null=True, blank=True)

    class Meta:
        permissions = [("operate_snapshot", "Can operate snapshots (retry, reset a claim, cancel)")]
        ordering = ["-created_at", "-id"]
        get_latest_by = "created_at"
        indexes = [
            # The reconciliation's sweep: snapshots still being made.
            models.Index(
                fields=["id"],
                name="exports_snapshot_open",
                condition=Q(status__in=[SnapshotStatus.PENDING, SnapshotStatus.CREATING]),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                name="exports_snapshot_status_valid", condition=Q(status__in=SnapshotStatus.values)
            ),
            models.CheckConstraint(
                name="exports_snapshot_finished_when_done",
                condition=Q(status__in=SNAPSHOT_FINISHED, finished_at__isnull=False)
                | (~Q(status__in=SNAPSHOT_FINISHED) & Q(finished_at__isnull=True)),
            ),
            models.CheckConstraint(
                name="exports_snapshot_failed_says_why",
                condition=~Q(status=SnapshotStatus.FAILED) | ~Q(error=""),
            ),
        ]

    def __str__(self) -> str:
        return f"snapshot {self.pk} of {self.mapping}"


class JobStatus(models.TextChoices):
    PENDING = "pending", "pending"
    CLAIMED = "claimed", "claimed"
    SUBMITTED = "submitted", "submitted"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"


JOB_FINISHED = [JobStatus.COMPLETED, JobStatus.FAILED]


class ExportJob(models.Model):
    """One entity of a snapshot, exported to a folder of Parquet files."""

    snapshot = models.ForeignKey(
        Snapshot, on_delete=models.CASCADE, related_name="jobs", db_index=False
    )  # the unique key leads with it
    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )  # reached through the snapshot
    position = models.PositiveSmallIntegerField("position", help_text="Claim order: nodes before edges.")
    job_type = models.CharField("type", max_length=4, choices=EntityKind.choices)
    entity_name = models.CharField("entity", max_length=100)
    engine = models.CharField("engine", max_length=10, choices=Engine.choices)
    sql = models.TextField("SQL")
    column_names = models.JSONField("columns", default=list)
    column_types = models.JSONField(
        "column types",
        default=list,
        blank=True,
        help_text="Declared for datasets; Trino's answer names them for queries.",
    )
    catalog = models.CharField("catalog", max_length=100, blank=True)
    starburst_role = models.CharField("Starburst role", max_length=200, blank=True)
    destination = models.CharField(
        "destination", max_length=1000, help_text="The folder its Parquet files are written to."
    )
    status = models.CharField("status", max_length=10, choices=JobStatus.choices, default=JobStatus.PENDING)
    job = models.OneToOneField(
        "jobs.Job",
        verbose_name="engine job",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The engine job that runs this export: its claims, attempts and history.",
    )
    generation = models.PositiveIntegerField(
        "claims", default=0, help_text="Counts the claims; each claim's files carry its number."
    )
    claimed_by = models.CharField("claimed by", max_length=200, blank=True)
    claimed_at = models.DateTimeField("claimed", null=True, blank=True)
    query_id = models.CharField("query id", max_length=200, blank=True)
    next_uri = models.CharField("next URI", max_length=2000, blank=True)
    next_poll_at = models.DateTimeField("next poll", null=True, blank=True)
    poll_count = models.PositiveIntegerField("polls", default=0)
    submitted_at = models.DateTimeField("submitted", null=True, blank=True)
    row_count = models.BigIntegerField("rows", null=True, blank=True)
    size_bytes = models.BigIntegerField("size (bytes)", null=True, blank=True)
    files = models.JSONField("files", default=list, blank=True)
    error_message = models.TextField("error", blank=True)
    created_at = models.DateTimeField("created")
    updated_at = models.DateTimeField(
        "updated", help_text="The last word from its worker or the control plane."
    )
    completed_at = models.DateTimeField("finished", null=True, blank=True)

    class Meta:
        ordering = ["snapshot", "position"]
        indexes = [
            # The reconciliation's sweep: rows the engine's outcome may have overtaken.
            models.Index(
                fields=["id"],
                name="exports_job_open",
                condition=Q(status__in=[JobStatus.PENDING, JobStatus.CLAIMED, JobStatus.SUBMITTED]),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["snapshot", "job_type", "entity_name"], name="exports_job_entity_per_snapshot"
            ),
            models.UniqueConstraint(
                fields=["snapshot", "position"], name="exports_job_position_per_snapshot"
            ),
            models.CheckConstraint(name="exports_job_status_valid", condition=Q(status__in=JobStatus.values)),
            models.CheckConstraint(
                name="exports_job_type_valid", condition=Q(job_type__in=EntityKind.values)
            ),
            models.CheckConstraint(name="exports_job_engine_valid", condition=Q(engine__in=Engine.values)),
            # A claimed or submitted job names its worker; a pending one names none.
            models.CheckConstraint(
                name="exports_job_claim_held",
                condition=~Q(status__in=[JobStatus.CLAIMED, JobStatus.SUBMITTED])
                | (~Q(claimed_by="") & Q(claimed_at__isnull=False)),
            ),
            models.CheckConstraint(
                name="exports_job_pending_unclaimed",
                condition=~Q(status=JobStatus.PENDING) | (Q(claimed_by="") & Q(claimed_at__isnull=True)),
            ),
            # A submitted job can always be polled, or asked about by its query id.
            models.CheckConstraint(
                name="exports_job_submitted_pollable",
                condition=~Q(status=JobStatus.SUBMITTED)
                | (~Q(query_id="") & Q(next_poll_at__isnull=False) & Q(submitted_at__isnull=False)),
            ),
            models.CheckConstraint(
                name="exports_job_completed_counted",
                condition=~Q(status=JobStatus.COMPLETED)
                | Q(row_count__isnull=False, size_bytes__isnull=False, completed_at__isnull=False),
            ),
            models.CheckConstraint(
                name="exports_job_failed_says_why",
                condition=~Q(status=JobStatus.FAILED)
                | (~Q(error_message="") & Q(completed_at__isnull=False)),
            ),
            models.CheckConstraint(
                name="exports_job_finished_when_done",
                condition=Q(status__in=JOB_FINISHED) | Q(completed_at__isnull=True),
            ),
            models.CheckConstraint(
                name="exports_job_counts_not_negative",
                condition=(Q(row_count__isnull=True) | Q(row_count__gte=0))
                & (Q(size_bytes__isnull=True) | Q(size_bytes__gte=0)),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.entity_name} of snapshot {self.snapshot_id}"


class EventKind(models.TextChoices):
    CREATED = "created", "created"
    CLAIMED = "claimed", "claimed"
    SUBMITTED = "submitted", "submitted"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"
    FELL_BACK = "fell_back", "exported directly instead"
    HANDED_BACK = "handed_back", "handed back by its worker"
    CLAIM_RESET = "claim_reset", "claim reset"
    LATE_REFUSED = "late_refused", "late update refused"
    RECONCILED = "reconciled", "reconciled with the engine"
    RETRIED = "retried", "retried"
    CANCELLED = "cancelled", "cancelled"


class ExportEvent(jobs.History):
    """One step of an export job's history: append-only."""

    job = models.ForeignKey(ExportJob, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField("what", max_length=15, choices=EventKind.choices)
    generation = models.PositiveIntegerField("claim", default=0)
    worker = models.CharField("worker", max_length=200, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["kind", "at"], name="exports_event_kind")]
        constraints = [
            models.CheckConstraint(name="exports_event_kind_valid", condition=Q(kind__in=EventKind.values)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class ExportConfig(models.Model):
    """Operator-editable settings of the export pipeline: one row."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    max_duration_seconds = models.PositiveIntegerField(
        "maximum duration (s)",
        default=3600,
        help_text="An export running longer than this is failed and its query cancelled (a direct "
        "export counts from its claim, an UNLOAD from its submission).",
    )
    updated_at = models.DateTimeField("updated", auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="updated by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        verbose_name = "export settings"
        verbose_name_plural = "export settings"
        constraints = [
            models.CheckConstraint(name="exports_config_single_row", condition=Q(id=1)),
            models.CheckConstraint(
                name="exports_config_duration_positive", condition=Q(max_duration_seconds__gte=60)
            ),
        ]

    def __str__(self) -> str:
        return "export settings"

    @classmethod
    def current(cls) -> ExportConfig:
        config, _ = cls.objects.get_or_create(id=1)
        return config
