"""Migration 0002: a mapping's own Trino role becomes its tenant's binding when the
tenant's mappings named exactly one role, with no catalog allowed yet; a tenant whose
mappings named several is left for an operator, and the migration says so."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from exports.models import TrinoBinding
from tests.support.base import tenant

BEFORE = [("exports", "0001_snapshots")]
AFTER = [("exports", "0002_trino_binding_claim_token")]


@pytest.mark.django_db(transaction=True)
def test_a_tenants_single_role_becomes_its_binding_and_several_are_left_to_operators(capsys):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("exports", "Mapping")
    acme, globex, initech = tenant("Acme"), tenant("Globex"), tenant("Initech")
    for owner, name, role in (
        (acme, "a", "analytics"),
        (acme, "b", "analytics"),
        (acme, "c", ""),
        (globex, "a", "one"),
        (globex, "b", "two"),
        (initech, "a", ""),
    ):
        old.objects.create(tenant_id=owner.pk, name=name, starburst_role=role)

    executor.loader.build_graph()
    executor.migrate(AFTER)

    bound = TrinoBinding.objects.get()
    assert (bound.tenant_id, bound.role, bound.catalogs) == (acme.pk, "analytics", [])
    said = capsys.readouterr().out
    assert f"tenant {globex.pk}: its mappings name 2 Trino roles (one, two)" in said
    assert f"tenant {initech.pk}" not in said
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
