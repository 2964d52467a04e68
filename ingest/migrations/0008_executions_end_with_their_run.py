"""Hook executions end with their run: a "cancelled" status, and the executions that
runs ended before it left waiting, launching or running settled now. Those were counted
by their tenant's launch window for ever, holding its launches back.

Going back, cancelled executions become failed, the nearest status the old constraint
allows.
"""

from django.db import migrations, models

SETTLE = """
UPDATE ingest_hookexecution e
SET status = 'cancelled', scheduled = false, finished_at = COALESCE(r.finished_at, now()),
    reason = 'ended with run ' || r.id || ' (' || r.status || ')'
FROM ingest_ingestbatch b JOIN ingest_ingestrun r ON r.id = b.run_id
WHERE b.id = e.batch_id AND r.status <> 'running'
  AND e.status IN ('waiting', 'launching', 'running')
"""

UNSETTLE = "UPDATE ingest_hookexecution SET status = 'failed' WHERE status = 'cancelled'"


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0007_breakers_per_tenant'),
        ('tenancy', '0001_initial'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='hookexecution',
            name='ingest_hook_execution_status_valid',
        ),
        migrations.AlterField(
            model_name='hookexecution',
            name='status',
            field=models.CharField(choices=[('waiting', 'waiting'), ('launching', 'launching'), ('running', 'running'), ('succeeded', 'succeeded'), ('failed', 'failed'), ('cancelled', 'cancelled')], default='waiting', max_length=10, verbose_name='status'),
        ),
        migrations.AddConstraint(
            model_name='hookexecution',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['waiting', 'launching', 'running', 'succeeded', 'failed', 'cancelled'])), name='ingest_hook_execution_status_valid'),
        ),
        migrations.RunSQL(SETTLE, UNSETTLE, elidable=False),
    ]
