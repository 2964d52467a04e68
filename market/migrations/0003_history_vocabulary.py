"""One history vocabulary (``jobs.History``): a feed's action is its ``kind`` (renamed,
its values kept), and it gains the columns it lacked."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("market", "0002_operate_permissions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField("marketaction", "action", "kind"),
        migrations.AddField(
            model_name="marketaction",
            name="from_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="from"),
        ),
        migrations.AddField(
            model_name="marketaction",
            name="message",
            field=models.TextField(blank=True, db_default="", default="", verbose_name="message"),
        ),
        migrations.AddField(
            model_name="marketaction",
            name="to_status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20, verbose_name="to"),
        ),
        migrations.AlterField(
            model_name="marketaction",
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
            model_name="marketaction",
            name="detail",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, models.JSONField()),
                default=dict,
                verbose_name="detail",
            ),
        ),
        migrations.AlterField(
            model_name="marketaction",
            name="kind",
            field=models.CharField(max_length=30, verbose_name="what"),
        ),
        migrations.AlterField(
            model_name="marketaction",
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
