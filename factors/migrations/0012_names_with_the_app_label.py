"""Every constraint and index of the app is named ``factors_…``: PostgreSQL keeps indexes
in one namespace with the tables, and the label says whose each is.

Renames only, nothing is rebuilt or checked again: an index by ``ALTER INDEX … RENAME``
(RenameIndex), a constraint by ``ALTER TABLE … RENAME CONSTRAINT`` (a partial unique
constraint is an index to PostgreSQL: ``ALTER INDEX``), while Django's state drops the
constraint under its old name and adds it under the new one. Renaming a constraint takes
its table's ACCESS EXCLUSIVE lock for an instant, once the transactions that use the
table have ended.
"""

import django.db.models.lookups
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

    dependencies = [('factors', '0011_factor_stale_by_year')]

    operations = [
        rename_constraint(
            'unit',
            'factors_unit',
            'unit_code_not_empty',
            models.CheckConstraint(condition=models.Q(('code', ''), _negated=True), name='factors_unit_code_not_empty'),
        ),
        rename_constraint(
            'carbonreport',
            'factors_carbonreport',
            'report_one_per_unit_and_year',
            models.UniqueConstraint(fields=('unit', 'year'), name='factors_report_one_per_unit_and_year'),
        ),
        rename_constraint(
            'carbonreport',
            'factors_carbonreport',
            'report_year_in_range',
            models.CheckConstraint(condition=models.Q(('year__gte', 2000), ('year__lte', 2100)), name='factors_report_year_in_range'),
        ),
        rename_constraint(
            'reportmodule',
            'factors_reportmodule',
            'module_one_per_type',
            models.UniqueConstraint(fields=('report', 'module_type'), name='factors_module_one_per_type'),
        ),
        rename_constraint(
            'reportmodule',
            'factors_reportmodule',
            'module_type_valid',
            models.CheckConstraint(condition=models.Q(('module_type__in', ['travel', 'energy', 'purchases'])), name='factors_module_type_valid'),
        ),
        migrations.RenameIndex(model_name='dataentry', old_name='entry_module_type_idx', new_name='factors_entry_module_type_idx'),
        rename_constraint(
            'dataentry',
            'factors_dataentry',
            'entry_quantity_nonnegative',
            models.CheckConstraint(condition=models.Q(('quantity__gte', 0)), name='factors_entry_quantity_nonnegative'),
        ),
        rename_constraint(
            'dataentry',
            'factors_dataentry',
            'entry_type_valid',
            models.CheckConstraint(condition=models.Q(('data_entry_type__in', ['plane', 'train', 'car', 'electricity', 'heating', 'goods', 'services'])), name='factors_entry_type_valid'),
        ),
        rename_constraint(
            'dataentry',
            'factors_dataentry',
            'entry_year_in_range',
            models.CheckConstraint(condition=models.Q(('year__gte', 2000), ('year__lte', 2100)), name='factors_entry_year_in_range'),
        ),
        rename_constraint(
            'dataentry',
            'factors_dataentry',
            'entry_classification_is_object',
            models.CheckConstraint(condition=django.db.models.lookups.Exact(models.Func(models.F('classification'), function='jsonb_typeof', output_field=models.CharField()), models.Value('object')), name='factors_entry_classification_is_object'),
        ),
        rename_constraint(
            'dataentry',
            'factors_dataentry',
            'entry_provenance',
            models.CheckConstraint(condition=models.Q(models.Q(('job__isnull', True), ('row_number__isnull', True), ('source', 'manual')), models.Q(('job__isnull', False), ('row_number__isnull', False), ('source__in', ['csv', 'api'])), _connector='OR'), name='factors_entry_provenance'),
        ),
        migrations.RenameIndex(model_name='entryload', old_name='load_not_current_idx', new_name='factors_load_not_current_idx'),
        rename_unique_index(
            'entryload',
            'load_one_current',
            models.UniqueConstraint(condition=models.Q(('state', 'current')), fields=('module', 'data_entry_type', 'source'), name='factors_load_one_current'),
        ),
        rename_constraint(
            'entryload',
            'factors_entryload',
            'load_state_valid',
            models.CheckConstraint(condition=models.Q(('state__in', ['loading', 'current', 'replaced'])), name='factors_load_state_valid'),
        ),
        rename_constraint(
            'entryload',
            'factors_entryload',
            'load_source_bulk',
            models.CheckConstraint(condition=models.Q(('source__in', ['csv', 'api'])), name='factors_load_source_bulk'),
        ),
        rename_constraint(
            'entryload',
            'factors_entryload',
            'load_type_valid',
            models.CheckConstraint(condition=models.Q(('data_entry_type__in', ['plane', 'train', 'car', 'electricity', 'heating', 'goods', 'services'])), name='factors_load_type_valid'),
        ),
        rename_constraint(
            'entryload',
            'factors_entryload',
            'load_dates_follow_state',
            models.CheckConstraint(condition=models.Q(models.Q(('current_since__isnull', True), ('state', 'loading')), models.Q(('current_since__isnull', False), ('replaced_at__isnull', True), ('state', 'current')), models.Q(('replaced_at__isnull', False), ('state', 'replaced')), _connector='OR'), name='factors_load_dates_follow_state'),
        ),
        rename_constraint(
            'loadchunk',
            'factors_loadchunk',
            'chunk_not_empty',
            models.CheckConstraint(condition=models.Q(('upto__gt', models.F('after'))), name='factors_chunk_not_empty'),
        ),
        rename_constraint(
            'loadchunk',
            'factors_loadchunk',
            'chunk_one_per_start',
            models.UniqueConstraint(fields=('load', 'after'), name='factors_chunk_one_per_start'),
        ),
        rename_constraint(
            'emissionfactor',
            'factors_emissionfactor',
            'factor_one_per_key',
            models.UniqueConstraint(fields=('data_entry_type', 'year', 'classification'), name='factors_factor_one_per_key'),
        ),
        rename_constraint(
            'emissionfactor',
            'factors_emissionfactor',
            'factor_value_nonnegative',
            models.CheckConstraint(condition=models.Q(('value__gte', 0)), name='factors_factor_value_nonnegative'),
        ),
        rename_constraint(
            'emissionfactor',
            'factors_emissionfactor',
            'factor_year_in_range',
            models.CheckConstraint(condition=models.Q(('year__gte', 2000), ('year__lte', 2100)), name='factors_factor_year_in_range'),
        ),
        rename_constraint(
            'emissionfactor',
            'factors_emissionfactor',
            'factor_type_valid',
            models.CheckConstraint(condition=models.Q(('data_entry_type__in', ['plane', 'train', 'car', 'electricity', 'heating', 'goods', 'services'])), name='factors_factor_type_valid'),
        ),
        rename_constraint(
            'emissionfactor',
            'factors_emissionfactor',
            'factor_classification_is_object',
            models.CheckConstraint(condition=django.db.models.lookups.Exact(models.Func(models.F('classification'), function='jsonb_typeof', output_field=models.CharField()), models.Value('object')), name='factors_factor_classification_is_object'),
        ),
        rename_constraint(
            'emission',
            'factors_emission',
            'emission_nonnegative',
            models.CheckConstraint(condition=models.Q(('kg_co2e__gte', 0)), name='factors_emission_nonnegative'),
        ),
        rename_constraint(
            'pipelinemodule',
            'factors_pipelinemodule',
            'pipeline_module_once',
            models.UniqueConstraint(fields=('module', 'pipeline_id'), name='factors_pipeline_module_once'),
        ),
        rename_constraint(
            'upload',
            'factors_upload',
            'upload_kind_valid',
            models.CheckConstraint(condition=models.Q(('kind__in', ['entries', 'factors', 'units'])), name='factors_upload_kind_valid'),
        ),
        rename_constraint(
            'upload',
            'factors_upload',
            'upload_columns_are_a_list',
            models.CheckConstraint(condition=django.db.models.lookups.Exact(models.Func(models.F('columns'), function='jsonb_typeof', output_field=models.CharField()), models.Value('array')), name='factors_upload_columns_are_a_list'),
        ),
        rename_constraint(
            'upload',
            'factors_upload',
            'upload_platform_files_have_no_tenant',
            models.CheckConstraint(condition=models.Q(('kind', 'entries'), ('tenant__isnull', True), _connector='OR'), name='factors_upload_platform_files_have_no_tenant'),
        ),
    ]
