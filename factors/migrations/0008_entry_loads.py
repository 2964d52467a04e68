"""Entry loads: the rows of a bulk ingest are read only once its load is current.

Bulk entries already in the table are given loads: an ingest that succeeded (or whose
job is pruned) is current, the latest one per module, type and source; an earlier one
beside it (only a failed upload's leftovers could be) is replaced; the rows of an ingest
that failed, was cancelled or is still unfinished are loading, out of the readers' sight
until that ingest's closing recalculation makes them current or retention removes them.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


CLASSIFY_EXISTING_ROWS = """
WITH loads AS (
    SELECT DISTINCT ON (job_id) job_id, module_id, data_entry_type, source
    FROM factors_dataentry WHERE job_id IS NOT NULL ORDER BY job_id
), ranked AS (
    SELECT l.*, (j.id IS NULL OR j.state = 'succeeded') AS done,
           row_number() OVER (PARTITION BY l.module_id, l.data_entry_type, l.source,
                                           (j.id IS NULL OR j.state = 'succeeded')
                              ORDER BY l.job_id DESC) AS rank
    FROM loads l LEFT JOIN jobs_job j ON j.id = l.job_id
)
INSERT INTO factors_entryload (job_id, module_id, data_entry_type, source, state, created_at,
                               current_since, replaced_at)
SELECT job_id, module_id, data_entry_type, source,
       CASE WHEN NOT done THEN 'loading' WHEN rank = 1 THEN 'current' ELSE 'replaced' END,
       now(), CASE WHEN done THEN now() END, CASE WHEN done AND rank > 1 THEN now() END
FROM ranked
"""


class Migration(migrations.Migration):

    dependencies = [
        ('factors', '0007_upload_payloads_by_id'),
        ('jobs', '0009_key_queue_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='EntryLoad',
            fields=[
                ('job', models.OneToOneField(db_constraint=False, help_text='The ingest that wrote the rows; kept as a plain id once the job is pruned.', on_delete=django.db.models.deletion.DO_NOTHING, primary_key=True, related_name='+', serialize=False, to='jobs.job', verbose_name='ingest job')),
                ('data_entry_type', models.CharField(choices=[('plane', 'Plane trips'), ('train', 'Train trips'), ('car', 'Car trips'), ('electricity', 'Electricity'), ('heating', 'Heating'), ('goods', 'Purchased goods'), ('services', 'Purchased services')], max_length=20, verbose_name='type')),
                ('source', models.CharField(choices=[('csv', 'CSV upload'), ('api', 'API source')], max_length=10, verbose_name='source')),
                ('state', models.CharField(choices=[('loading', 'Loading (not read)'), ('current', 'Current'), ('replaced', 'Replaced (not read)')], default='loading', max_length=10, verbose_name='state')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, verbose_name='started')),
                ('current_since', models.DateTimeField(blank=True, null=True, verbose_name='current since')),
                ('replaced_at', models.DateTimeField(blank=True, null=True, verbose_name='replaced')),
                ('module', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='factors.reportmodule', verbose_name='module')),
            ],
            options={
                'ordering': ['-job_id'],
                'indexes': [models.Index(condition=models.Q(('state', 'current'), _negated=True), fields=['created_at'], name='load_not_current_idx')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('state', 'current')), fields=('module', 'data_entry_type', 'source'), name='load_one_current'), models.CheckConstraint(condition=models.Q(('state__in', ['loading', 'current', 'replaced'])), name='load_state_valid'), models.CheckConstraint(condition=models.Q(('source__in', ['csv', 'api'])), name='load_source_bulk'), models.CheckConstraint(condition=models.Q(('data_entry_type__in', ['plane', 'train', 'car', 'electricity', 'heating', 'goods', 'services'])), name='load_type_valid'), models.CheckConstraint(condition=models.Q(models.Q(('current_since__isnull', True), ('state', 'loading')), models.Q(('current_since__isnull', False), ('replaced_at__isnull', True), ('state', 'current')), models.Q(('replaced_at__isnull', False), ('state', 'replaced')), _connector='OR'), name='load_dates_follow_state')],
            },
        ),
        migrations.RunSQL(CLASSIFY_EXISTING_ROWS, migrations.RunSQL.noop),
    ]
