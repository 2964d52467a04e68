"""Scraped references and the scrape runs that bring them; ingest runs of one reference."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0001_runs"),
        ("tenancy", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ScrapeRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenancy.tenant", verbose_name="tenant")),
                ("source", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="scrape_runs", to="ingest.ingestsource", verbose_name="source")),
                ("run_id", models.CharField(help_text="The scraper's own id for the run.", max_length=200, verbose_name="scrape run")),
                ("syncs", models.PositiveIntegerField(default=0, verbose_name="syncs")),
                ("references_received", models.PositiveBigIntegerField(default=0, verbose_name="references received")),
                ("references_changed", models.PositiveBigIntegerField(default=0, verbose_name="references new or changed")),
                ("first_sync_at", models.DateTimeField(verbose_name="first sync")),
                ("last_sync_at", models.DateTimeField(verbose_name="last sync")),
                ("last_synced_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL, verbose_name="last synced by")),
            ],
            options={
                "ordering": ["-last_sync_at", "-id"],
                "constraints": [
                    models.UniqueConstraint(fields=("source", "run_id"), name="ingest_scrape_run_once"),
                    models.CheckConstraint(condition=models.Q(("run_id", ""), _negated=True), name="ingest_scrape_run_id_not_empty"),
                ],
            },
        ),
        migrations.CreateModel(
            name="ScrapeReference",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenancy.tenant", verbose_name="tenant")),
                ("source", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="references", to="ingest.ingestsource", verbose_name="source")),
                ("external_id", models.CharField(max_length=255, verbose_name="external id")),
                ("payload", models.JSONField(verbose_name="payload")),
                ("payload_hash", models.CharField(help_text="SHA-256 of the payload as canonical JSON (sorted keys, no spaces).", max_length=64, verbose_name="payload hash")),
                ("first_seen_at", models.DateTimeField(verbose_name="first seen")),
                ("changed_at", models.DateTimeField(verbose_name="payload changed")),
                ("changed_in", models.ForeignKey(help_text="The scrape run whose sync brought this payload.", on_delete=django.db.models.deletion.PROTECT, related_name="+", to="ingest.scraperun", verbose_name="changed in")),
            ],
            options={
                "verbose_name": "scraped reference",
                "ordering": ["source", "external_id"],
                "constraints": [
                    models.UniqueConstraint(fields=("source", "external_id"), name="ingest_reference_once_per_source"),
                    models.CheckConstraint(condition=models.Q(("external_id", ""), _negated=True), name="ingest_reference_external_id_not_empty"),
                    models.CheckConstraint(condition=models.Q(("payload_hash__regex", "^[0-9a-f]{64}$")), name="ingest_reference_hash_is_sha256"),
                ],
            },
        ),
        migrations.AddField(
            model_name="ingestrun",
            name="reference",
            field=models.ForeignKey(blank=True, help_text="A run that ingests one scraped reference (its handoff's ingestion); empty for a run over the whole source.", null=True, on_delete=django.db.models.deletion.PROTECT, related_name="runs", to="ingest.scrapereference", verbose_name="reference"),
        ),
        migrations.RemoveConstraint(model_name="ingestrun", name="ingest_run_one_running_per_source"),
        migrations.AddConstraint(
            model_name="ingestrun",
            constraint=models.UniqueConstraint(condition=models.Q(("reference__isnull", True), ("status", "running")), fields=("source",), name="ingest_run_one_running_per_source"),
        ),
        migrations.AddConstraint(
            model_name="ingestrun",
            constraint=models.UniqueConstraint(condition=models.Q(("status", "running")), fields=("reference",), name="ingest_run_one_running_per_reference"),
        ),
    ]
