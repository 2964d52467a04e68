"""The catalogue's migrations, on an empty database and on one with hooks: each free hook
becomes an entry of its own, disabled and offered only to the hook's tenant, and the hook
names it with no parameters; executions take their run's tenant; the breakers shared by
every tenant are dropped. Going back puts each entry's fields back on its hooks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ingest.runs.models import Hook, HookExecution, HookTemplate, RunnerBreaker

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_CATALOGUE = "0004_composite_tenant_keys"  # the catalogue's parent; market data is beside it
AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
STEAL = ["/bin/sh", "-c", "tr '\\0' '\\n' </proc/$PPID/environ"]


@pytest.fixture
def forward_at_the_end():
    """Whatever the test does, the next one finds the schema migrated to the end."""
    yield
    call_command("migrate", "ingest", verbosity=0)


def _apps_at(migration: str):
    return MigrationExecutor(connection).loader.project_state(("ingest", migration)).apps


def _free_hooks():
    """Before the catalogue: two tenants' sources with free hooks, a batch with an
    execution, and a breaker shared by every tenant."""
    apps = _apps_at(BEFORE_CATALOGUE)
    tenant = apps.get_model("tenancy", "Tenant")
    source_model = apps.get_model("ingest", "IngestSource")
    hook = apps.get_model("ingest", "Hook")
    acme = tenant.objects.create(name="Acme", slug="acme")
    globex = tenant.objects.create(name="Globex", slug="globex")
    orders = source_model.objects.create(tenant=acme, name="orders", kind="files")
    leads = source_model.objects.create(tenant=globex, name="leads", kind="files")
    hook.objects.create(
        source=orders,
        name="steal",
        position=0,
        image="evil:1",
        command=STEAL,
        env={"X": "1"},
        cpu_limit="64",
        timeout_seconds=900,
    )
    hook.objects.create(
        source=leads, name="check", position=0, image="hooks:1", command=["check", "--strict"]
    )
    run = apps.get_model("ingest", "IngestRun").objects.create(
        tenant=acme, source=orders, max_failures=3, started_at=AT
    )
    batch = apps.get_model("ingest", "IngestBatch").objects.create(
        run=run, sequence=1, records=1, has_more=False, location="staged", fetched_at=AT
    )
    apps.get_model("ingest", "HookExecution").objects.create(
        batch=batch, hook_name="steal", position=0, runner_target="local:host"
    )
    apps.get_model("ingest", "RunnerBreaker").objects.create(target="local:host", state="closed")
    return acme, globex


def test_an_empty_database_goes_back_and_forward(forward_at_the_end):
    call_command("migrate", "ingest", BEFORE_CATALOGUE, verbosity=0)
    call_command("migrate", "ingest", verbosity=0)
    assert not HookTemplate.objects.exists() and not Hook.objects.exists()


def test_free_hooks_become_disabled_entries_of_their_tenants_and_going_back_puts_them_back(
    forward_at_the_end,
):
    # One trip back and forward serves both directions: the forward one is checked on the
    # entries it made, the backward one on the hooks those entries go back to.
    call_command("migrate", "ingest", BEFORE_CATALOGUE, verbosity=0)
    acme, globex = _free_hooks()

    call_command("migrate", "ingest", verbosity=0)

    steal = Hook.objects.get(name="steal")
    entry = steal.template
    assert entry.name == f"acme-orders-steal-{steal.pk}"
    assert (entry.enabled, entry.image, entry.command, entry.env) == (False, "evil:1", STEAL, {"X": "1"})
    assert (entry.cpu_limit, entry.timeout_seconds, entry.parameters) == ("64", 900, [])
    assert list(entry.tenants.values_list("pk", flat=True)) == [acme.pk]
    assert steal.parameters == {}
    check = Hook.objects.get(name="check")
    assert check.template != entry
    assert list(check.template.tenants.values_list("pk", flat=True)) == [globex.pk]
    assert HookExecution.objects.get().tenant_id == acme.pk
    assert not RunnerBreaker.objects.exists()

    HookTemplate.objects.filter(hooks__name="check").update(command=["check", "--lenient"])

    call_command("migrate", "ingest", BEFORE_CATALOGUE, verbosity=0)

    hook = _apps_at(BEFORE_CATALOGUE).get_model("ingest", "Hook")
    back = {
        row.name: (row.image, row.command, row.env, row.cpu_limit, row.timeout_seconds)
        for row in hook.objects.all()
    }
    assert back == {
        "steal": ("evil:1", STEAL, {"X": "1"}, "64", 900),
        "check": ("hooks:1", ["check", "--lenient"], {}, "", 600),
    }
