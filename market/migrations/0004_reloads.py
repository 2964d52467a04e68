"""Loads of days that have bars: an operator's reload and the daily batch's re-fetch of
its last open days (two triggers the trigger's check constraint lets through), and the
permission that now covers the reload too."""

from django.db import migrations, models

# Back before these triggers, a load keeps the nearest older one: the old constraint
# would refuse them, and the loads are history worth keeping.
OLDER_TRIGGER = {"reload": "operator", "refetch": "gap_fill"}


def to_older_triggers(apps, schema_editor):
    DayLoad = apps.get_model("market", "DayLoad")
    for trigger, older in OLDER_TRIGGER.items():
        DayLoad.objects.filter(trigger=trigger).update(trigger=older)


class Migration(migrations.Migration):
    dependencies = [
        ("market", "0003_history_vocabulary"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="marketfeed",
            options={
                "ordering": ["name"],
                "permissions": [("operate_marketfeed", "Can operate market feeds (gap-fill, reload)")],
            },
        ),
        migrations.RemoveConstraint(
            model_name="dayload",
            name="market_load_trigger_valid",
        ),
        migrations.AlterField(
            model_name="dayload",
            name="trigger",
            field=models.CharField(
                choices=[
                    ("schedule", "the daily batch"),
                    ("gap_fill", "the daily batch's gap-fill"),
                    ("operator", "an operator's gap-fill"),
                    ("reload", "an operator's reload"),
                    ("refetch", "the daily batch's re-fetch"),
                ],
                max_length=10,
                verbose_name="by",
            ),
        ),
        migrations.AddConstraint(
            model_name="dayload",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("trigger__in", ["schedule", "gap_fill", "operator", "reload", "refetch"])
                ),
                name="market_load_trigger_valid",
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, to_older_triggers),
    ]
