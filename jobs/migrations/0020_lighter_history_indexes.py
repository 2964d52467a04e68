"""Fewer index entries written per job.

Each claim and each outcome inserts a history row and rewrites the job's row, and
every index of either table takes an entry each time. Three of them bought nothing for
most of those entries: the history's job index duplicated ``jobs_jobevent_job_idx``,
which leads with the job; its actor index held a NULL for every row the engine wrote;
and the job table's tenant index held every job of the platform's own, which is never
looked up by a missing tenant. The last two become partial, the first goes. Built
concurrently: these are the busiest tables.
"""

import django.db.models.deletion
from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0019_job_fillfactor"),
        ("tenancy", "0002_names_with_the_app_label"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        RemoveIndexConcurrently(model_name="job", name="jobs_job_tenant_idx"),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("tenant__isnull", False)), fields=["tenant", "-id"], name="jobs_job_tenant_idx"
            ),
        ),
        AddIndexConcurrently(
            model_name="jobevent",
            index=models.Index(
                condition=models.Q(("actor__isnull", False)), fields=["actor"], name="jobs_jobevent_actor_idx"
            ),
        ),
        migrations.AlterField(
            model_name="jobevent",
            name="actor",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
                verbose_name="by",
            ),
        ),
        migrations.AlterField(
            model_name="jobevent",
            name="job",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="events", to="jobs.job"
            ),
        ),
    ]
