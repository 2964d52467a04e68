"""One history vocabulary (``jobs.History``): an export job's events gain ``via`` and
``detail``."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("exports", "0003_operate_permissions"),
    ]

    operations = [
        migrations.AddField(
            model_name="exportevent",
            name="detail",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, models.JSONField()),
                default=dict,
                verbose_name="detail",
            ),
        ),
        migrations.AddField(
            model_name="exportevent",
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
            model_name="exportevent",
            name="from_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="from"),
        ),
        migrations.AlterField(
            model_name="exportevent",
            name="message",
            field=models.TextField(blank=True, db_default="", default="", verbose_name="message"),
        ),
        migrations.AlterField(
            model_name="exportevent",
            name="to_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="to"),
        ),
    ]
