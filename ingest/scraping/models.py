"""What a scraper hands over, and what became of it.

A scraper syncs a scrape run's references (``ScrapeReference``: an external id and its
latest payload, per source). Each new payload of a reference is handed off to ingestion
once: an ``IngestionHandoff`` per ``(reference, payload_hash)``, whose ingestion is an
ingest run of the reference, and whose every transition is a ``HandoffTransition``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

import jobs

# Composite foreign keys, which Django does not declare (migration 0004 adds them): a
# reference's (source, tenant) must be a source of that tenant, a handoff's (reference,
# source, tenant) a reference of that source and tenant. One lookup per row written checks
# what three foreign keys did, and also that the three agree. The Django foreign keys they
# cover have no constraint of their own.

# The scraper's ids: what a URL or a filter may carry, bounded.
EXTERNAL_ID_LENGTH = 255
SCRAPE_RUN_ID_LENGTH = 200
HASH_LENGTH = 64  # SHA-256, hex


class ScrapeRun(models.Model):
    """One run of the scraper over a source, named by the scraper; its syncs add up here."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", verbose_name="tenant", on_delete=models.PROTECT, related_name="+"
    )
    source = models.ForeignKey(
        "ingest.IngestSource", verbose_name="source", on_delete=models.PROTECT, related_name="scrape_runs"
    )
    run_id = models.CharField(
        "scrape run", max_length=SCRAPE_RUN_ID_LENGTH, help_text="The scraper's own id for the run."
    )
    syncs = models.PositiveIntegerField("syncs", default=0)
    references_received = models.PositiveBigIntegerField("references received", default=0)
    references_changed = models.PositiveBigIntegerField("references new or changed", default=0)
    first_sync_at = models.DateTimeField("first sync")
    last_sync_at = models.DateTimeField("last sync")
    last_synced_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="last synced by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-last_sync_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["source", "run_id"], name="ingest_scrape_run_once"),
            models.CheckConstraint(name="ingest_scrape_run_id_not_empty", condition=~Q(run_id="")),
        ]

    def __str__(self) -> str:
        return f"scrape run {self.run_id}"


class ScrapeReference(models.Model):
    """A thing the scraper found (a listing, a document…), by its external id, with the
    payload the latest sync brought and that payload's hash."""

    # Checked together by ingest_reference_source_of_tenant; the unique constraint on
    # (source, external id) serves lookups by source.
    tenant = models.ForeignKey(
        "tenancy.Tenant",
        verbose_name="tenant",
        on_delete=models.PROTECT,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    source = models.ForeignKey(
        "ingest.IngestSource",
        verbose_name="source",
        on_delete=models.PROTECT,
        related_name="references",
        db_constraint=False,
        db_index=False,
    )
    external_id = models.CharField("external id", max_length=EXTERNAL_ID_LENGTH)
    payload = models.JSONField("payload")
    payload_hash = models.CharField(
        "payload hash",
        max_length=HASH_LENGTH,
        help_text="SHA-256 of the payload as canonical JSON (RFC 8785, JCS).",
    )
    first_seen_at = models.DateTimeField("first seen")
    changed_at = models.DateTimeField("payload changed")
    changed_in = models.ForeignKey(
        ScrapeRun,
        verbose_name="changed in",
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The scrape run whose sync brought this payload.",
    )

    class Meta:
        ordering = ["source", "external_id"]
        verbose_name = "scraped reference"
        constraints = [
            models.UniqueConstraint(
                fields=["source", "external_id"], name="ingest_reference_once_per_source"
            ),
            # What a handoff's (reference, source, tenant) points at.
            models.UniqueConstraint(
                fields=["id", "source", "tenant"], name="ingest_reference_id_source_tenant"
            ),
            models.CheckConstraint(
                name="ingest_reference_external_id_not_empty", condition=~Q(external_id="")
            ),
            models.CheckConstraint(
                name="ingest_reference_hash_is_sha256", condition=Q(payload_hash__regex=r"^[0-9a-f]{64}$")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.external_id} ({self.source})"


class HandoffStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"


class HandoffReason(models.TextChoices):
    """Why a handoff is where it is: its last transition's reason."""

    QUEUED_FROM_SCRAPE = "queued_from_scrape", "a sync brought this payload"
    INGESTION_JOB_QUEUED = "ingestion_job_queued", "its ingestion was queued"
    INGESTION_JOB_ALREADY_ACTIVE = (
        "ingestion_job_already_active",
        "the reference's ingestion was already queued or running; this payload waits for it",
    )
    PAYLOAD_UNCHANGED = "payload_unchanged", "a sync brought a payload handed off before"
    INGESTION_STARTED = "ingestion_started", "its ingest run started"
    INGESTION_COMPLETED = "ingestion_completed", "its ingest run succeeded"
    INGESTION_FAILED = "ingestion_failed", "its ingest run failed"
    INGESTION_CANCELLED = "ingestion_cancelled", "its ingest run was cancelled"
    RETRY_EXHAUSTED = "retry_exhausted", "queueing its ingestion failed on every attempt"
    QUEUE_REFUSED = "queue_refused", "its ingestion could not be queued"
    SUPERSEDED = "superseded", "a newer payload of the reference was ingested instead"
    RETRIED_BY_OPERATOR = "retried_by_operator", "an operator queued it again"


class IngestionHandoff(models.Model):
    """One payload of a reference handed to ingestion, and how far it got."""

    Status = HandoffStatus
    Reason = HandoffReason

    # Checked together by ingest_handoff_reference_of_source; the indexes below serve
    # lookups by source and by reference.
    tenant = models.ForeignKey(
        "tenancy.Tenant",
        verbose_name="tenant",
        on_delete=models.PROTECT,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    source = models.ForeignKey(
        "ingest.IngestSource",
        verbose_name="source",
        on_delete=models.PROTECT,
        related_name="handoffs",
        db_constraint=False,
        db_index=False,
    )
    reference = models.ForeignKey(
        ScrapeReference,
        verbose_name="reference",
        on_delete=models.CASCADE,
        related_name="handoffs",
        db_constraint=False,
        db_index=False,
    )
    payload_hash = models.CharField("payload hash", max_length=HASH_LENGTH)
    scrape_run = models.ForeignKey(
        ScrapeRun,
        verbose_name="scrape run",
        on_delete=models.PROTECT,
        related_name="handoffs",
        db_index=False,  # by_scrape
        help_text="The scrape run whose sync brought the payload.",
    )
    status = models.CharField("status", max_length=10, choices=Status.choices, default=Status.QUEUED)
    reason_code = models.CharField("reason", max_length=40, choices=Reason.choices)
    attempts = models.PositiveSmallIntegerField(
        "queue attempts",
        default=0,
        help_text="Tries to queue the ingestion in the sync (transient errors are retried).",
    )
    last_error = models.TextField("last error", blank=True)
    job_id = models.BigIntegerField(
        "ingestion job",
        null=True,
        blank=True,
        help_text="The engine job that starts the ingest run (no foreign key: the engine's "
        "retention prunes jobs, the handoff's history stays).",
    )
    # Indexed where set (below): a queued handoff has no run, an automatic one no user.
    ingest_run = models.ForeignKey(
        "ingest.IngestRun",
        verbose_name="ingest run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="handoffs",
        db_index=False,
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="synced by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    created_at = models.DateTimeField("created")
    updated_at = models.DateTimeField(
        "updated", help_text="Kept by the database on every update (a trigger)."
    )

    class Meta:
        permissions = [("operate_ingestionhandoff", "Can retry ingestion handoffs")]
        db_table = "ingestion_handoffs"
        ordering = ["-id"]
        verbose_name = "ingestion handoff"
        indexes = [
            models.Index(fields=["source", "status"], name="ingest_handoff_by_status"),
            models.Index(fields=["scrape_run"], name="ingest_handoff_by_scrape"),
            models.Index(fields=["reference"], condition=Q(status="queued"), name="ingest_handoff_waiting"),
            models.Index(
                fields=["ingest_run"], condition=Q(ingest_run__isnull=False), name="ingest_handoff_by_run"
            ),
            models.Index(
                fields=["created_by"],
                condition=Q(created_by__isnull=False),
                name="ingest_handoff_by_user",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["reference", "payload_hash"], name="ingest_handoff_reference_payload_unique"
            ),
            models.CheckConstraint(
                name="ingest_handoff_status_valid", condition=Q(status__in=HandoffStatus.values)
            ),
            models.CheckConstraint(
                name="ingest_handoff_reason_valid", condition=Q(reason_code__in=HandoffReason.values)
            ),
            models.CheckConstraint(
                name="ingest_handoff_hash_is_sha256", condition=Q(payload_hash__regex=r"^[0-9a-f]{64}$")
            ),
            # Running and after: the ingest run it is about is named (until retention).
            models.CheckConstraint(
                name="ingest_handoff_queued_has_no_run",
                condition=~Q(status="queued") | Q(ingest_run__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"handoff {self.pk} of {self.reference_id}"


class HandoffTransition(jobs.History):
    """A handoff's move from one status (or reason) to the next: when, why (``kind``, the
    reason code) and by whom. ``from_status`` is empty for the handoff's creation."""

    handoff = models.ForeignKey(
        IngestionHandoff, verbose_name="handoff", on_delete=models.CASCADE, related_name="transitions"
    )
    to_status = models.CharField("to", max_length=20, choices=HandoffStatus.choices)
    kind = models.CharField("what", max_length=40, choices=HandoffReason.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )

    class Meta:
        db_table = "ingestion_handoff_transitions"
        ordering = ["handoff", "at", "id"]
        indexes = [
            # Most moves are the system's own (no actor): only a person's are indexed.
            models.Index(
                fields=["actor"], condition=Q(actor__isnull=False), name="ingest_transition_by_actor"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                name="ingest_handoff_transition_to_valid", condition=Q(to_status__in=HandoffStatus.values)
            ),
            models.CheckConstraint(
                name="ingest_handoff_transition_reason_valid",
                condition=Q(kind__in=HandoffReason.values),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.to_status} ({self.kind})"
