"""Every constraint and index of the app is named ``jobs_…``: PostgreSQL keeps indexes
in one namespace with the tables, and the label says whose each is.

Renames only, nothing is rebuilt or checked again: an index by ``ALTER INDEX … RENAME``
(RenameIndex), a constraint by ``ALTER TABLE … RENAME CONSTRAINT`` (a partial unique
constraint is an index to PostgreSQL: ``ALTER INDEX``), while Django's state drops the
constraint under its old name and adds it under the new one. Renaming a constraint takes
its table's ACCESS EXCLUSIVE lock for an instant, once the transactions that use the
table have ended.
"""

from django.db import migrations, models


def rename_constraint(model_name, table, old, constraint):
    """The constraint ``old`` of ``table`` becomes ``constraint`` (its new name)."""
    forwards = f'ALTER TABLE "{table}" RENAME CONSTRAINT "{old}" TO "{constraint.name}"'
    backwards = f'ALTER TABLE "{table}" RENAME CONSTRAINT "{constraint.name}" TO "{old}"'
    return _renamed(model_name, old, constraint, forwards, backwards)


def rename_unique_index(model_name, old, constraint):
    """The partial unique constraint ``old`` (an index) becomes ``constraint``."""
    forwards = f'ALTER INDEX "{old}" RENAME TO "{constraint.name}"'
    backwards = f'ALTER INDEX "{constraint.name}" RENAME TO "{old}"'
    return _renamed(model_name, old, constraint, forwards, backwards)


def _renamed(model_name, old, constraint, forwards, backwards):
    return migrations.SeparateDatabaseAndState(
        database_operations=[migrations.RunSQL(forwards, backwards)],
        state_operations=[
            migrations.RemoveConstraint(model_name=model_name, name=old),
            migrations.AddConstraint(model_name=model_name, constraint=constraint),
        ],
    )


class Migration(migrations.Migration):

    dependencies = [('jobs', '0015_snooze_wake_key')]

    operations = [
        migrations.RenameIndex(model_name='job', old_name='job_claim_idx', new_name='jobs_job_claim_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_lease_idx', new_name='jobs_job_lease_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_type_state_idx', new_name='jobs_job_type_state_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_state_idx', new_name='jobs_job_state_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_finished_idx', new_name='jobs_job_finished_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_key_idx', new_name='jobs_job_key_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_key_queue_idx', new_name='jobs_job_key_queue_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_tenant_idx', new_name='jobs_job_tenant_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_running_tenant_idx', new_name='jobs_job_running_tenant_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_parent_idx', new_name='jobs_job_parent_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_created_by_idx', new_name='jobs_job_created_by_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_failed_idx', new_name='jobs_job_failed_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_rescued_idx', new_name='jobs_job_rescued_idx'),
        migrations.RenameIndex(model_name='job', old_name='job_wake_key_idx', new_name='jobs_job_wake_key_idx'),
        rename_constraint(
            'job',
            'jobs_job',
            'job_state_valid',
            models.CheckConstraint(condition=models.Q(('state__in', ['pending', 'running', 'succeeded', 'failed', 'cancelled'])), name='jobs_job_state_valid'),
        ),
        rename_constraint(
            'job',
            'jobs_job',
            'job_attempts_within_max',
            models.CheckConstraint(condition=models.Q(('attempts__lte', models.F('max_attempts'))), name='jobs_job_attempts_within_max'),
        ),
        rename_constraint(
            'job',
            'jobs_job',
            'job_max_attempts_positive',
            models.CheckConstraint(condition=models.Q(('max_attempts__gte', 1)), name='jobs_job_max_attempts_positive'),
        ),
        rename_constraint(
            'job',
            'jobs_job',
            'job_running_has_lease',
            models.CheckConstraint(condition=models.Q(models.Q(('state', 'running'), _negated=True), models.Q(('lease_expires_at__isnull', False), ('lease_token__isnull', False), ('locked_at__isnull', False)), _connector='OR'), name='jobs_job_running_has_lease'),
        ),
        rename_constraint(
            'job',
            'jobs_job',
            'job_finished_has_time',
            models.CheckConstraint(condition=models.Q(models.Q(('state__in', ['succeeded', 'failed', 'cancelled']), _negated=True), ('finished_at__isnull', False), _connector='OR'), name='jobs_job_finished_has_time'),
        ),
        rename_constraint(
            'job',
            'jobs_job',
            'job_progress_nonnegative',
            models.CheckConstraint(condition=models.Q(('progress_done__gte', 0)), name='jobs_job_progress_nonnegative'),
        ),
        rename_constraint(
            'job',
            'jobs_job',
            'job_current_needs_key',
            models.CheckConstraint(condition=models.Q(('is_current', False), ('concurrency_key__isnull', False), _connector='OR'), name='jobs_job_current_needs_key'),
        ),
        rename_constraint(
            'job',
            'jobs_job',
            'job_key_scope_nonnegative',
            models.CheckConstraint(condition=models.Q(('key_scope__gte', 0)), name='jobs_job_key_scope_nonnegative'),
        ),
        rename_unique_index(
            'job',
            'job_one_current_per_key',
            models.UniqueConstraint(condition=models.Q(('is_current', True)), fields=('key_scope', 'concurrency_key'), name='jobs_job_one_current_per_key'),
        ),
        rename_unique_index(
            'job',
            'job_one_active_per_unique_key',
            models.UniqueConstraint(condition=models.Q(('state__in', ['pending', 'running']), ('unique_key__isnull', False)), fields=('tenant', 'unique_key'), name='jobs_job_one_active_per_unique_key', nulls_distinct=False),
        ),
        rename_unique_index(
            'job',
            'job_one_pending_per_key',
            models.UniqueConstraint(condition=models.Q(('pending_key__isnull', False), ('started_at__isnull', True), ('state', 'pending')), fields=('tenant', 'pending_key'), name='jobs_job_one_pending_per_key', nulls_distinct=False),
        ),
        migrations.RenameIndex(model_name='dependency', old_name='dependency_prerequisite_idx', new_name='jobs_dependency_prereq_idx'),
        rename_constraint(
            'dependency',
            'jobs_dependency',
            'dependency_once',
            models.UniqueConstraint(fields=('waiter', 'prerequisite'), name='jobs_dependency_once'),
        ),
        rename_constraint(
            'dependency',
            'jobs_dependency',
            'dependency_not_on_itself',
            models.CheckConstraint(condition=models.Q(('waiter', models.F('prerequisite')), _negated=True), name='jobs_dependency_not_on_itself'),
        ),
        migrations.RenameIndex(model_name='jobevent', old_name='jobevent_job_idx', new_name='jobs_jobevent_job_idx'),
        migrations.RenameIndex(model_name='jobevent', old_name='jobevent_incident_idx', new_name='jobs_jobevent_incident_idx'),
        migrations.RenameIndex(model_name='delivery', old_name='delivery_quarantined_idx', new_name='jobs_delivery_quarantined_idx'),
        migrations.RenameIndex(model_name='delivery', old_name='delivery_quarantined_by_idx', new_name='jobs_delivery_quarantiner_idx'),
        rename_constraint(
            'delivery',
            'jobs_delivery',
            'delivery_once_per_subscriber',
            models.UniqueConstraint(fields=('event', 'subscriber'), name='jobs_delivery_once_per_subscriber'),
        ),
        rename_constraint(
            'delivery',
            'jobs_delivery',
            'delivery_quarantine_has_reason',
            models.CheckConstraint(condition=models.Q(('quarantined_at__isnull', True), models.Q(('quarantine_reason', ''), _negated=True), _connector='OR'), name='jobs_delivery_quarantine_has_reason'),
        ),
    ]
