"""Every constraint and index of the app is named ``ingest_…``: PostgreSQL keeps indexes
in one namespace with the tables, and the label says whose each is. The market data's
are left as they are: they move to an app of their own, whose label they will bear.

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

    dependencies = [('ingest', '0008_executions_end_with_their_run')]

    operations = [
        migrations.RenameIndex(model_name='ingestionhandoff', old_name='ingestion_handoffs_by_status', new_name='ingest_handoff_by_status'),
        migrations.RenameIndex(model_name='ingestionhandoff', old_name='ingestion_handoffs_by_scrape', new_name='ingest_handoff_by_scrape'),
        migrations.RenameIndex(model_name='ingestionhandoff', old_name='ingestion_handoffs_waiting', new_name='ingest_handoff_waiting'),
        migrations.RenameIndex(model_name='ingestionhandoff', old_name='ingestion_handoffs_by_run', new_name='ingest_handoff_by_run'),
        migrations.RenameIndex(model_name='ingestionhandoff', old_name='ingestion_handoffs_by_user', new_name='ingest_handoff_by_user'),
        rename_constraint(
            'ingestionhandoff',
            'ingestion_handoffs',
            'ingestion_handoffs_reference_payload_unique',
            models.UniqueConstraint(fields=('reference', 'payload_hash'), name='ingest_handoff_reference_payload_unique'),
        ),
        rename_constraint(
            'ingestionhandoff',
            'ingestion_handoffs',
            'ingestion_handoffs_status_valid',
            models.CheckConstraint(condition=models.Q(('status__in', ['queued', 'running', 'completed', 'failed'])), name='ingest_handoff_status_valid'),
        ),
        rename_constraint(
            'ingestionhandoff',
            'ingestion_handoffs',
            'ingestion_handoffs_reason_valid',
            models.CheckConstraint(condition=models.Q(('reason_code__in', ['queued_from_scrape', 'ingestion_job_queued', 'ingestion_job_already_active', 'payload_unchanged', 'ingestion_started', 'ingestion_completed', 'ingestion_failed', 'ingestion_cancelled', 'retry_exhausted', 'queue_refused', 'superseded', 'retried_by_operator'])), name='ingest_handoff_reason_valid'),
        ),
        rename_constraint(
            'ingestionhandoff',
            'ingestion_handoffs',
            'ingestion_handoffs_hash_is_sha256',
            models.CheckConstraint(condition=models.Q(('payload_hash__regex', '^[0-9a-f]{64}$')), name='ingest_handoff_hash_is_sha256'),
        ),
        rename_constraint(
            'ingestionhandoff',
            'ingestion_handoffs',
            'ingestion_handoffs_queued_has_no_run',
            models.CheckConstraint(condition=models.Q(models.Q(('status', 'queued'), _negated=True), ('ingest_run__isnull', True), _connector='OR'), name='ingest_handoff_queued_has_no_run'),
        ),
        migrations.RenameIndex(model_name='handofftransition', old_name='handoff_transition_by_actor', new_name='ingest_transition_by_actor'),
        rename_constraint(
            'handofftransition',
            'ingestion_handoff_transitions',
            'ingestion_handoff_transition_to_valid',
            models.CheckConstraint(condition=models.Q(('to_status__in', ['queued', 'running', 'completed', 'failed'])), name='ingest_handoff_transition_to_valid'),
        ),
        rename_constraint(
            'handofftransition',
            'ingestion_handoff_transitions',
            'ingestion_handoff_transition_reason_valid',
            models.CheckConstraint(condition=models.Q(('reason_code__in', ['queued_from_scrape', 'ingestion_job_queued', 'ingestion_job_already_active', 'payload_unchanged', 'ingestion_started', 'ingestion_completed', 'ingestion_failed', 'ingestion_cancelled', 'retry_exhausted', 'queue_refused', 'superseded', 'retried_by_operator'])), name='ingest_handoff_transition_reason_valid'),
        ),
        # Written by hand in migration 0004, outside Django's state.
        migrations.RunSQL(
            'ALTER TABLE "ingestion_handoffs" RENAME CONSTRAINT "ingestion_handoffs_reference_of_source" TO "ingest_handoff_reference_of_source"',
            'ALTER TABLE "ingestion_handoffs" RENAME CONSTRAINT "ingest_handoff_reference_of_source" TO "ingestion_handoffs_reference_of_source"',
        ),
    ]
