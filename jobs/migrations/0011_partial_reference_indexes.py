"""Fewer index entries per enqueue: the tenant's own index went (job_tenant_idx leads
with the tenant), and a job's parent and creator are indexed only where set."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0010_dependency'),
        ('tenancy', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='job',
            name='created_by',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='job',
            name='parent',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='children', to='jobs.job'),
        ),
        migrations.AlterField(
            model_name='job',
            name='tenant',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='tenancy.tenant'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('parent__isnull', False)), fields=['parent'], name='job_parent_idx'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('created_by__isnull', False)), fields=['created_by'], name='job_created_by_idx'),
        ),
    ]
