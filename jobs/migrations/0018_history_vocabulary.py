"""One history vocabulary (``jobs.History``): a job's events say ``from_status`` and
``to_status``, as every history table does, and gain ``via`` and ``detail``. Renames and
added columns with their defaults: every row stays as it was."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_operate_permissions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField("jobevent", "from_state", "from_status"),
        migrations.RenameField("jobevent", "to_state", "to_status"),
        migrations.AddField(
            model_name="jobevent",
            name="detail",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, models.JSONField()),
                default=dict,
                verbose_name="detail",
            ),
        ),
        migrations.AddField(
            model_name="jobevent",
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
        migrations.AlterField(
            model_name="jobevent",
            name="actor",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
                verbose_name="by",
            ),
        ),
        migrations.AlterField(
            model_name="jobevent",
            name="at",
            field=models.DateTimeField(verbose_name="at"),
        ),
        migrations.AlterField(
            model_name="jobevent",
            name="from_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="from"),
        ),
        migrations.AlterField(
            model_name="jobevent",
            name="message",
            field=models.TextField(blank=True, db_default="", default="", verbose_name="message"),
        ),
        migrations.AlterField(
            model_name="jobevent",
            name="to_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="to"),
        ),
    ]
