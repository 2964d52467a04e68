"""Leaner writes for references and handoffs, with stronger keys.

A reference's tenant and source, and a handoff's tenant, source and reference, were three
foreign keys each: three lookups per row written (a first sync of 50,000 references
spent a second and a half of its commit on them), and nothing kept them consistent. Each
is now one composite foreign key, which also holds a reference to its source's tenant and
a handoff to its reference's source and tenant. Indexes that another index already leads
with are dropped; those on columns mostly NULL hold only the rows that have a value.
Reversible: going back restores the single foreign keys and their indexes.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# Deferred to the commit, as Django's own foreign keys are: a sync writes the references
# and then the handoffs in one transaction.
COMPOSITE_KEYS = """
ALTER TABLE ingest_scrapereference ADD CONSTRAINT ingest_reference_source_of_tenant
    FOREIGN KEY (source_id, tenant_id) REFERENCES ingest_ingestsource (id, tenant_id)
    DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE ingestion_handoffs ADD CONSTRAINT ingestion_handoffs_reference_of_source
    FOREIGN KEY (reference_id, source_id, tenant_id)
    REFERENCES ingest_scrapereference (id, source_id, tenant_id)
    DEFERRABLE INITIALLY DEFERRED;
"""
DROP_COMPOSITE_KEYS = """
ALTER TABLE ingestion_handoffs DROP CONSTRAINT ingestion_handoffs_reference_of_source;
ALTER TABLE ingest_scrapereference DROP CONSTRAINT ingest_reference_source_of_tenant;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0003_ingestion_handoffs'),
        ('tenancy', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='handofftransition',
            name='actor',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='by'),
        ),
        migrations.AlterField(
            model_name='ingestionhandoff',
            name='created_by',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='synced by'),
        ),
        migrations.AlterField(
            model_name='ingestionhandoff',
            name='ingest_run',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='handoffs', to='ingest.ingestrun', verbose_name='ingest run'),
        ),
        migrations.AlterField(
            model_name='ingestionhandoff',
            name='reference',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='handoffs', to='ingest.scrapereference', verbose_name='reference'),
        ),
        migrations.AlterField(
            model_name='ingestionhandoff',
            name='scrape_run',
            field=models.ForeignKey(db_index=False, help_text='The scrape run whose sync brought the payload.', on_delete=django.db.models.deletion.PROTECT, related_name='handoffs', to='ingest.scraperun', verbose_name='scrape run'),
        ),
        migrations.AlterField(
            model_name='ingestionhandoff',
            name='source',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='handoffs', to='ingest.ingestsource', verbose_name='source'),
        ),
        migrations.AlterField(
            model_name='ingestionhandoff',
            name='tenant',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.tenant', verbose_name='tenant'),
        ),
        migrations.AlterField(
            model_name='scrapereference',
            name='source',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='references', to='ingest.ingestsource', verbose_name='source'),
        ),
        migrations.AlterField(
            model_name='scrapereference',
            name='tenant',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.tenant', verbose_name='tenant'),
        ),
        migrations.AddIndex(
            model_name='handofftransition',
            index=models.Index(condition=models.Q(('actor__isnull', False)), fields=['actor'], name='handoff_transition_by_actor'),
        ),
        migrations.AddIndex(
            model_name='ingestionhandoff',
            index=models.Index(condition=models.Q(('ingest_run__isnull', False)), fields=['ingest_run'], name='ingestion_handoffs_by_run'),
        ),
        migrations.AddIndex(
            model_name='ingestionhandoff',
            index=models.Index(condition=models.Q(('created_by__isnull', False)), fields=['created_by'], name='ingestion_handoffs_by_user'),
        ),
        migrations.AddConstraint(
            model_name='ingestsource',
            constraint=models.UniqueConstraint(fields=('id', 'tenant'), name='ingest_source_id_tenant'),
        ),
        migrations.AddConstraint(
            model_name='scrapereference',
            constraint=models.UniqueConstraint(fields=('id', 'source', 'tenant'), name='ingest_reference_id_source_tenant'),
        ),
        migrations.RunSQL(COMPOSITE_KEYS, reverse_sql=DROP_COMPOSITE_KEYS),
    ]
