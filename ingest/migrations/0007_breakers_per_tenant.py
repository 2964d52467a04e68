"""Breakers and launch windows per runner target and tenant.

A hook execution carries its run's tenant, so that a tenant's launch window counts only
its own launches waiting for room, from one partial index. The breakers shared by every
tenant are dropped: a breaker is what the target answered lately, learnt again within
one window, and a shared row cannot be told apart into tenants. Going back drops the
tenants' breakers for the same reason.
"""

import django.db.models.deletion
from django.db import migrations, models

COPY_TENANTS = """
UPDATE ingest_hookexecution e SET tenant_id = r.tenant_id
FROM ingest_ingestbatch b JOIN ingest_ingestrun r ON r.id = b.run_id
WHERE b.id = e.batch_id
"""


def drop_breakers(apps, schema_editor):
    apps.get_model("ingest", "RunnerBreaker").objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0006_hook_catalogue'),
        ('tenancy', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='hookexecution',
            name='tenant',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.tenant', verbose_name='tenant'),
        ),
        migrations.RunSQL(COPY_TENANTS, migrations.RunSQL.noop, elidable=False),
        migrations.AlterField(
            model_name='hookexecution',
            name='tenant',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.tenant', verbose_name='tenant'),
        ),
        migrations.RemoveIndex(model_name='hookexecution', name='ingest_hook_awaiting_room'),
        migrations.AddIndex(
            model_name='hookexecution',
            index=models.Index(condition=models.Q(('scheduled', False), ('status__in', ['launching', 'running'])), fields=['runner_target', 'tenant'], name='ingest_hook_awaiting_room'),
        ),
        migrations.RunPython(drop_breakers, migrations.RunPython.noop, elidable=False),
        migrations.AlterField(
            model_name='runnerbreaker',
            name='target',
            field=models.CharField(max_length=200, verbose_name='runner'),
        ),
        migrations.AddField(
            model_name='runnerbreaker',
            name='tenant',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenancy.tenant', verbose_name='tenant'),
        ),
        # Going back, before the target is unique again.
        migrations.RunPython(migrations.RunPython.noop, drop_breakers, elidable=False),
        migrations.AlterModelOptions(
            name='runnerbreaker',
            options={'ordering': ['target', 'tenant'], 'verbose_name': 'hook runner breaker'},
        ),
        migrations.AddConstraint(
            model_name='runnerbreaker',
            constraint=models.UniqueConstraint(fields=('target', 'tenant'), name='ingest_breaker_per_target_tenant'),
        ),
    ]
