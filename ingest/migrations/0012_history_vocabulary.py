"""One history vocabulary (``jobs.History``): a run's action and a handoff's transition
call their note ``message``, a transition its reason code ``kind``; each gains the columns it
lacked. Renames and added columns: every row stays as it was."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0011_operate_permissions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField("runaction", "note", "message"),
        migrations.RenameField("handofftransition", "note", "message"),
        migrations.RenameField("handofftransition", "reason_code", "kind"),
        # PostgreSQL's check follows its column's new name: only Django's idea of it changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint("handofftransition", "ingest_handoff_transition_reason_valid"),
                migrations.AddConstraint(
                    model_name="handofftransition",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "kind__in",
                                [
                                    "queued_from_scrape",
                                    "ingestion_job_queued",
                                    "ingestion_job_already_active",
                                    "payload_unchanged",
                                    "ingestion_started",
                                    "ingestion_completed",
                                    "ingestion_failed",
                                    "ingestion_cancelled",
                                    "retry_exhausted",
                                    "queue_refused",
                                    "superseded",
                                    "retried_by_operator",
                                ],
                            )
                        ),
                        name="ingest_handoff_transition_reason_valid",
                    ),
                ),
            ]
        ),
        migrations.AddField(
            model_name="handofftransition",
            name="detail",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, models.JSONField()),
                default=dict,
                verbose_name="detail",
            ),
        ),
        migrations.AddField(
            model_name="handofftransition",
            name="via",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="admin, api, command, or the part of Conveyor that acted (pipeline, engine …).",
                max_length=20,
                verbose_name="via",
            ),
        ),
        migrations.AddField(
            model_name="runaction",
            name="detail",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, models.JSONField()),
                default=dict,
                verbose_name="detail",
            ),
        ),
        migrations.AddField(
            model_name="runaction",
            name="from_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="from"),
        ),
        migrations.AddField(
            model_name="runaction",
            name="to_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="to"),
        ),
        migrations.AlterField(
            model_name="handofftransition",
            name="from_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="from"),
        ),
        migrations.AlterField(
            model_name="handofftransition",
            name="kind",
            field=models.CharField(
                choices=[
                    ("queued_from_scrape", "a sync brought this payload"),
                    ("ingestion_job_queued", "its ingestion was queued"),
                    (
                        "ingestion_job_already_active",
                        "the reference's ingestion was already queued or running; this payload waits for it",
                    ),
                    ("payload_unchanged", "a sync brought a payload handed off before"),
                    ("ingestion_started", "its ingest run started"),
                    ("ingestion_completed", "its ingest run succeeded"),
                    ("ingestion_failed", "its ingest run failed"),
                    ("ingestion_cancelled", "its ingest run was cancelled"),
                    ("retry_exhausted", "queueing its ingestion failed on every attempt"),
                    ("queue_refused", "its ingestion could not be queued"),
                    ("superseded", "a newer payload of the reference was ingested instead"),
                    ("retried_by_operator", "an operator queued it again"),
                ],
                max_length=40,
                verbose_name="what",
            ),
        ),
        migrations.AlterField(
            model_name="handofftransition",
            name="message",
            field=models.TextField(blank=True, db_default="", default="", verbose_name="message"),
        ),
        migrations.AlterField(
            model_name="handofftransition",
            name="to_status",
            field=models.CharField(
                choices=[
                    ("queued", "queued"),
                    ("running", "running"),
                    ("completed", "completed"),
                    ("failed", "failed"),
                ],
                max_length=20,
                verbose_name="to",
            ),
        ),
        migrations.AlterField(
            model_name="runaction",
            name="kind",
            field=models.CharField(
                choices=[
                    ("started", "started"),
                    ("cancelled", "cancelled"),
                    ("retried_hooks", "retried failed hooks"),
                    ("retried_from_batch", "retried from the failed batch"),
                    ("failed", "failed"),
                    ("succeeded", "succeeded"),
                ],
                max_length=20,
                verbose_name="what",
            ),
        ),
        migrations.AlterField(
            model_name="runaction",
            name="message",
            field=models.TextField(blank=True, db_default="", default="", verbose_name="message"),
        ),
        migrations.AlterField(
            model_name="runaction",
            name="via",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="admin, api, command, or the part of Conveyor that acted (pipeline, engine …).",
                max_length=20,
                verbose_name="via",
            ),
        ),
    ]
