"""Handoffs of scraped payloads to ingestion, with their history.

Reversible, and destructive only of handoff history: going back drops the two handoff
tables and the trigger (and its function) that keeps ``updated_at``; references, scrape
runs and ingest runs stay. Without these tables a sync still stores references and says
that handoffs are unavailable.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

REASONS = [
    ("queued_from_scrape", "a sync brought this payload"),
    ("ingestion_job_queued", "its ingestion was queued"),
    ("ingestion_job_already_active", "the reference's ingestion was already queued or running; this payload waits for it"),
    ("payload_unchanged", "a sync brought a payload handed off before"),
    ("ingestion_started", "its ingest run started"),
    ("ingestion_completed", "its ingest run succeeded"),
    ("ingestion_failed", "its ingest run failed"),
    ("ingestion_cancelled", "its ingest run was cancelled"),
    ("retry_exhausted", "queueing its ingestion failed on every attempt"),
    ("queue_refused", "its ingestion could not be queued"),
    ("superseded", "a newer payload of the reference was ingested instead"),
    ("retried_by_operator", "an operator queued it again"),
]
STATUSES = [("queued", "queued"), ("running", "running"), ("completed", "completed"), ("failed", "failed")]

TIMESTAMP_TRIGGER = """
CREATE FUNCTION update_ingestion_handoff_timestamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := statement_timestamp();
    RETURN NEW;
END
$$;
CREATE TRIGGER trg_update_ingestion_handoff_timestamp
    BEFORE UPDATE ON ingestion_handoffs
    FOR EACH ROW EXECUTE FUNCTION update_ingestion_handoff_timestamp();
"""
DROP_TIMESTAMP_TRIGGER = """
DROP TRIGGER IF EXISTS trg_update_ingestion_handoff_timestamp ON ingestion_handoffs;
DROP FUNCTION IF EXISTS update_ingestion_handoff_timestamp();
"""


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0002_scrape_references"),
        ("tenancy", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="IngestionHandoff",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenancy.tenant", verbose_name="tenant")),
                ("source", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="handoffs", to="ingest.ingestsource", verbose_name="source")),
                ("reference", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="handoffs", to="ingest.scrapereference", verbose_name="reference")),
                ("payload_hash", models.CharField(max_length=64, verbose_name="payload hash")),
                ("scrape_run", models.ForeignKey(help_text="The scrape run whose sync brought the payload.", on_delete=django.db.models.deletion.PROTECT, related_name="handoffs", to="ingest.scraperun", verbose_name="scrape run")),
                ("status", models.CharField(choices=STATUSES, default="queued", max_length=10, verbose_name="status")),
                ("reason_code", models.CharField(choices=REASONS, max_length=40, verbose_name="reason")),
                ("attempts", models.PositiveSmallIntegerField(default=0, help_text="Tries to queue the ingestion in the sync (transient errors are retried).", verbose_name="queue attempts")),
                ("last_error", models.TextField(blank=True, verbose_name="last error")),
                ("job_id", models.BigIntegerField(blank=True, help_text="The engine job that starts the ingest run (no foreign key: the engine's retention prunes jobs, the handoff's history stays).", null=True, verbose_name="ingestion job")),
                ("ingest_run", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="handoffs", to="ingest.ingestrun", verbose_name="ingest run")),
                ("created_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL, verbose_name="synced by")),
                ("created_at", models.DateTimeField(verbose_name="created")),
                ("updated_at", models.DateTimeField(help_text="Kept by the database on every update (a trigger).", verbose_name="updated")),
            ],
            options={
                "verbose_name": "ingestion handoff",
                "db_table": "ingestion_handoffs",
                "ordering": ["-id"],
                "indexes": [
                    models.Index(fields=["source", "status"], name="ingestion_handoffs_by_status"),
                    models.Index(fields=["scrape_run"], name="ingestion_handoffs_by_scrape"),
                    models.Index(condition=models.Q(("status", "queued")), fields=["reference"], name="ingestion_handoffs_waiting"),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("reference", "payload_hash"), name="ingestion_handoffs_reference_payload_unique"),
                    models.CheckConstraint(condition=models.Q(("status__in", ["queued", "running", "completed", "failed"])), name="ingestion_handoffs_status_valid"),
                    models.CheckConstraint(condition=models.Q(("reason_code__in", [code for code, _ in REASONS])), name="ingestion_handoffs_reason_valid"),
                    models.CheckConstraint(condition=models.Q(("payload_hash__regex", "^[0-9a-f]{64}$")), name="ingestion_handoffs_hash_is_sha256"),
                    models.CheckConstraint(condition=models.Q(models.Q(("status", "queued"), _negated=True), ("ingest_run__isnull", True), _connector="OR"), name="ingestion_handoffs_queued_has_no_run"),
                ],
            },
        ),
        migrations.CreateModel(
            name="HandoffTransition",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("handoff", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="transitions", to="ingest.ingestionhandoff", verbose_name="handoff")),
                ("at", models.DateTimeField(verbose_name="at")),
                ("from_status", models.CharField(blank=True, help_text="Empty for the handoff's creation.", max_length=10, verbose_name="from")),
                ("to_status", models.CharField(choices=STATUSES, max_length=10, verbose_name="to")),
                ("reason_code", models.CharField(choices=REASONS, max_length=40, verbose_name="reason")),
                ("note", models.TextField(blank=True, verbose_name="note")),
                ("actor", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL, verbose_name="by")),
            ],
            options={
                "db_table": "ingestion_handoff_transitions",
                "ordering": ["handoff", "at", "id"],
                "constraints": [
                    models.CheckConstraint(condition=models.Q(("to_status__in", ["queued", "running", "completed", "failed"])), name="ingestion_handoff_transition_to_valid"),
                    models.CheckConstraint(condition=models.Q(("reason_code__in", [code for code, _ in REASONS])), name="ingestion_handoff_transition_reason_valid"),
                ],
            },
        ),
        migrations.RunSQL(TIMESTAMP_TRIGGER, reverse_sql=DROP_TIMESTAMP_TRIGGER),
    ]
