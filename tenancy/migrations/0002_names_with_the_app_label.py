"""Every constraint and index of the app is named ``tenancy_…``: PostgreSQL keeps indexes
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

    dependencies = [('tenancy', '0001_initial')]

    operations = [
        rename_constraint(
            'membership',
            'tenancy_membership',
            'membership_tenant_xor_operator',
            models.CheckConstraint(condition=models.Q(models.Q(('is_platform_operator', False), ('tenant__isnull', False)), models.Q(('is_platform_operator', True), ('tenant__isnull', True)), _connector='OR'), name='tenancy_membership_tenant_xor_operator'),
        ),
    ]
