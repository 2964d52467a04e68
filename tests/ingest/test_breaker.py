"""The hook runner's circuit breakers, one per target and tenant: a breaker opens on a
burst of its tenant's transient failures, holds that tenant's launches back until its
probe time, lets one probe through, closes on success and backs off further on a failed
probe; other tenants' hooks on the target launch all the while, and one tenant's full
launch window holds nobody else."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import jobs
from ingest.runs import breaker, services
from ingest.runs.errors import TransientResourceError
from ingest.runs.models import (
    BreakerState,
    ExecutionStatus,
    HookExecution,
    IngestBatch,
    IngestRun,
    RunnerBreaker,
    RunStatus,
)
from ingest.runs.runners.local import LocalRunner
from jobs.testing import T0
from tests.support.base import tenant
from tests.support.ingest import builders

TARGET = "kubernetes:cluster.example/conveyor-hooks"
RULES = {
    "INGEST_BREAKER_THRESHOLD": 3,
    "INGEST_BREAKER_WINDOW_SECONDS": 60,
    "INGEST_BREAKER_COOLDOWN_SECONDS": 30,
    "INGEST_BREAKER_MAX_COOLDOWN_SECONDS": 100,
}

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rules")]


@pytest.fixture
def rules():
    with override_settings(**RULES):
        yield


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def _open_it(tenant: int, start: float = 0) -> None:
    for n in range(3):
        breaker.record_failure(TARGET, tenant, 100 + n, "0/3 nodes are available", at(start + n))


def test_a_closed_breaker_admits_and_records_a_success_in_one_statement_each(
    django_assert_max_num_queries, acme
):
    with django_assert_max_num_queries(1):
        assert breaker.admit(TARGET, acme.pk, 1, at(0)).allowed
    with django_assert_max_num_queries(1):
        breaker.record_success(TARGET, acme.pk, 1, at(0))
    assert RunnerBreaker.objects.get(target=TARGET, tenant=acme).window == 9  # one more may wait
    breaker.record_success(TARGET, acme.pk, 1, at(1))
    assert RunnerBreaker.objects.get(target=TARGET, tenant=acme).window == 10
    RunnerBreaker.objects.filter(target=TARGET, tenant=acme).update(window=1024)
    breaker.record_success(TARGET, acme.pk, 1, at(2))
    widest = RunnerBreaker.objects.get(target=TARGET, tenant=acme)
    assert (widest.window, widest.updated_at) == (1024, at(1))  # nothing left to write


def test_an_admission_is_settled_only_when_a_success_would_change_nothing(acme):
    assert not breaker.admit(TARGET, acme.pk, 1, at(0)).settled  # no row yet: a success creates it
    breaker.record_success(TARGET, acme.pk, 1, at(0))
    assert not breaker.admit(TARGET, acme.pk, 1, at(1)).settled  # the window can still widen
    RunnerBreaker.objects.filter(target=TARGET, tenant=acme).update(window=1024)
    assert breaker.admit(TARGET, acme.pk, 1, at(2)).settled
    breaker.record_failure(TARGET, acme.pk, 2, "evicted", at(3))
    RunnerBreaker.objects.filter(target=TARGET, tenant=acme).update(window=1024)
    assert not breaker.admit(TARGET, acme.pk, 1, at(4)).settled  # a success clears the failures


def test_failures_below_the_threshold_or_spread_beyond_the_window_keep_it_closed(acme):
    breaker.record_failure(TARGET, acme.pk, 1, "evicted", at(0))
    breaker.record_failure(TARGET, acme.pk, 2, "evicted", at(10))
    breaker.record_failure(TARGET, acme.pk, 3, "evicted", at(80))  # the window started again
    row = RunnerBreaker.objects.get(target=TARGET, tenant=acme)
    assert (row.state, row.failures) == (BreakerState.CLOSED, 1)


def test_a_burst_opens_it_and_every_launch_waits_for_the_probe_time(acme):
    _open_it(acme.pk)
    row = RunnerBreaker.objects.get(target=TARGET, tenant=acme)
    assert row.state == BreakerState.OPEN
    assert row.next_probe_at == at(2 + 30)
    held = breaker.admit(TARGET, acme.pk, 7, at(10))
    assert not held.allowed and held.wait_seconds == pytest.approx(22)
    assert breaker.admit(TARGET, acme.pk, 8, at(31)).allowed is False
    assert RunnerBreaker.objects.get(target=TARGET, tenant=acme).denied == 2


def test_one_probe_at_a_time_and_its_success_closes_it(acme):
    _open_it(acme.pk)
    probe = breaker.admit(TARGET, acme.pk, 7, at(40))
    assert probe.allowed and probe.probe
    assert not breaker.admit(TARGET, acme.pk, 8, at(41)).allowed
    assert breaker.admit(TARGET, acme.pk, 7, at(42)).allowed  # the probe polling its own hook
    breaker.record_success(TARGET, acme.pk, 7, at(43))
    row = RunnerBreaker.objects.get(target=TARGET, tenant=acme)
    assert (row.state, row.failures, row.probe_job) == (BreakerState.CLOSED, 0, None)
    assert breaker.admit(TARGET, acme.pk, 8, at(44)).allowed


def test_a_failed_probe_reopens_it_for_twice_as_long_up_to_the_cap(acme):
    _open_it(acme.pk)
    now = 40
    cooldowns = []
    for _ in range(4):
        assert breaker.admit(TARGET, acme.pk, 7, at(now)).probe
        row = breaker.record_failure(TARGET, acme.pk, 7, "still full", at(now))
        cooldowns.append(row.cooldown_seconds)
        now = (row.next_probe_at - T0).total_seconds()
    assert cooldowns == [60, 100, 100, 100]
    assert RunnerBreaker.objects.get(target=TARGET, tenant=acme).times_opened == 5


def test_a_probe_whose_worker_vanished_is_handed_on(acme):
    _open_it(acme.pk)
    assert breaker.admit(TARGET, acme.pk, 7, at(40)).probe
    assert not breaker.admit(TARGET, acme.pk, 8, at(100)).allowed
    late = at(40) + breaker.PROBE_GRACE + timedelta(seconds=1)
    assert breaker.admit(TARGET, acme.pk, 8, late).probe


def test_failures_elsewhere_while_open_do_not_move_the_probe_time(acme):
    _open_it(acme.pk)
    breaker.record_failure(TARGET, acme.pk, 50, "evicted", at(5))
    assert RunnerBreaker.objects.get(target=TARGET, tenant=acme).next_probe_at == at(32)


def test_an_operator_can_close_it(acme):
    _open_it(acme.pk)
    breaker.reset(TARGET, acme.pk, at(5))
    assert breaker.admit(TARGET, acme.pk, 9, at(6)).allowed


class BreakerMachine(RuleBasedStateMachine):
    """Any sequence of launches, failures, successes and time: at most one probe is out,
    nothing launches while the breaker is open before its probe time, and the cool-down
    stays within its bounds."""

    @initialize()
    def start(self):
        RunnerBreaker.objects.all().delete()
        self.tenant = tenant("Acme")
        self.now = 0.0

    @rule(seconds=st.floats(min_value=0, max_value=200))
    def wait(self, seconds):
        self.now += seconds

    @rule(job=st.integers(1, 5))
    def launch(self, job):
        before = RunnerBreaker.objects.filter(target=TARGET, tenant=self.tenant).first()
        admitted = breaker.admit(TARGET, self.tenant.pk, job, at(self.now))
        if before is not None and before.state == BreakerState.OPEN and at(self.now) < before.next_probe_at:
            assert not admitted.allowed
        if admitted.probe:
            row = RunnerBreaker.objects.get(target=TARGET, tenant=self.tenant)
            assert (row.state, row.probe_job) == (BreakerState.HALF_OPEN, job)

    @rule(job=st.integers(1, 5))
    def fail(self, job):
        breaker.record_failure(TARGET, self.tenant.pk, job, "pressure", at(self.now))

    @rule(job=st.integers(1, 5))
    def succeed(self, job):
        breaker.record_success(TARGET, self.tenant.pk, job, at(self.now))

    @invariant()
    def bounded(self):
        row = RunnerBreaker.objects.filter(target=TARGET, tenant=self.tenant).first()
        if row is None:
            return
        assert 0 <= row.cooldown_seconds <= 100
        assert (row.state == BreakerState.HALF_OPEN) == (row.probe_job is not None)
        if row.state != BreakerState.CLOSED:
            assert row.next_probe_at is not None


@pytest.mark.django_db
def test_the_breaker_keeps_its_rules_whatever_happens(rules):
    BreakerMachine.TestCase.settings = settings(
        max_examples=60,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    BreakerMachine.TestCase().runTest()


def test_the_breakers_are_on_the_metrics_page_per_tenant(clock, settings, acme, globex):
    from django.test import Client
    from prometheus_client.parser import text_string_to_metric_families

    settings.METRICS_PUBLIC = True
    _open_it(acme.pk)
    breaker.record_success(TARGET, globex.pk, 1, T0)
    body = Client().get("/metrics").content.decode()
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }

    def state(tenant: str, value: str) -> float:
        return found[
            ("conveyor_hook_breaker_state", (("state", value), ("target", TARGET), ("tenant", tenant)))
        ]

    assert (state("acme", "open"), state("acme", "closed")) == (1, 0)
    assert (state("globex", "open"), state("globex", "closed")) == (0, 1)
    labels = (("target", TARGET), ("tenant", "acme"))
    assert found[("conveyor_hook_breaker_opened_total", labels)] == 1
    # The clock stands at T0, the probe is due 32 s later.
    assert found[("conveyor_hook_breaker_next_probe_seconds", labels)] == 32


# --- one tenant's faults stay with that tenant ----------------------------------------------------


def _waiting_for_room(owner, count: int) -> None:
    """``count`` of ``owner``'s hooks launched on TARGET and not yet given room there."""
    source = builders.source(owner, f"busy-{owner.slug}")
    run = IngestRun.objects.create(tenant=owner, source=source, max_failures=3, started_at=T0)
    batch = IngestBatch.objects.create(
        run=run, sequence=1, records=1, has_more=False, location="staged", fetched_at=T0
    )
    HookExecution.objects.bulk_create(
        HookExecution(
            batch=batch,
            tenant=owner,
            hook_name="hook0",
            position=n,
            status=ExecutionStatus.LAUNCHING,
            runner_target=TARGET,
        )
        for n in range(count)
    )


def test_one_tenants_failures_open_its_breaker_and_nobody_elses(acme, globex):
    _open_it(acme.pk)

    held = breaker.admit(TARGET, acme.pk, 7, at(10))
    other = breaker.admit(TARGET, globex.pk, 8, at(10))

    assert not held.allowed
    assert other.allowed and not other.probe
    assert not RunnerBreaker.objects.filter(tenant=globex).exists()


def test_one_tenants_full_launch_window_holds_only_that_tenant(acme, globex):
    _waiting_for_room(acme, 3)
    breaker.record_success(TARGET, acme.pk, 1, at(0))
    RunnerBreaker.objects.filter(tenant=acme).update(window=3)

    full = breaker.admit(TARGET, acme.pk, 1, at(1))
    other = breaker.admit(TARGET, globex.pk, 2, at(1))

    assert (full.allowed, full.state) == (False, "full")
    assert other.allowed
    _waiting_for_room(globex, 2)
    RunnerBreaker.objects.filter(tenant=acme).update(window=8)
    # Globex's launches are not acme's: they make two tenants share acme's window (4 each),
    # and acme's 3 fit in that.
    assert breaker.admit(TARGET, acme.pk, 1, at(2)).allowed


@pytest.mark.parametrize("sql", ["_ADMIT", "_WITHDRAW"])
def test_the_launch_window_and_its_sharers_are_counted_from_its_partial_index(acme, sql):
    params = {
        "target": TARGET,
        "tenant": acme.pk,
        "window": 8,
        "launching": "launching",
        "running": "running",
        "execution": 1,
        "launched_at": T0,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + getattr(breaker, sql), params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    scans = [line for line in plan.splitlines() if "ingest_hookexecution" in line]
    # The tenant's own count, the first waiting tenant and each next one: all on the index.
    assert len(scans) == 3 and all("ingest_hook_awaiting_room" in line for line in scans), plan
    assert "ingest_ingestbatch" not in plan and "ingest_ingestrun" not in plan


def test_a_tenant_alone_has_the_whole_window_and_shares_it_once_others_wait(acme, globex):
    initech = tenant("Initech")
    breaker.record_success(TARGET, acme.pk, 1, at(0))
    RunnerBreaker.objects.filter(tenant=acme).update(window=6)
    _waiting_for_room(acme, 5)
    alone = breaker.admit(TARGET, acme.pk, 1, at(1))
    assert (alone.allowed, alone.share, alone.tenants) == (True, 6, 1)

    _waiting_for_room(globex, 1)
    _waiting_for_room(initech, 1)
    held = breaker.admit(TARGET, acme.pk, 1, at(2))
    newcomer = breaker.admit(TARGET, tenant("Umbrella").pk, 2, at(2))

    assert (held.allowed, held.state, held.waiting, held.share, held.tenants) == (False, "share", 5, 2, 3)
    assert (newcomer.allowed, newcomer.share, newcomer.tenants) == (True, 2, 4)
    assert breaker.admit(TARGET, globex.pk, 3, at(2)).allowed  # 1 waiting, its share 2
    assert RunnerBreaker.objects.get(tenant=acme).denied == 1


def test_launches_beyond_a_tenants_share_are_withdrawn_newest_first_only_while_others_wait(acme, globex):
    _waiting_for_room(acme, 4)
    mine = list(HookExecution.objects.filter(tenant=acme).order_by("position"))
    for n, execution in enumerate(mine):
        execution.launched_at = at(n)
        execution.save(update_fields=["launched_at"])

    def withdrawn() -> list[bool]:
        return [breaker.withdraw(TARGET, acme.pk, e.pk, e.launched_at) for e in mine]

    assert withdrawn() == [False] * 4  # alone: every launch it made stays
    _waiting_for_room(globex, 1)
    assert withdrawn() == [False, False, False, False]  # 8 // 2 tenants: a share of 4
    breaker.record_success(TARGET, acme.pk, 1, at(9))
    RunnerBreaker.objects.filter(tenant=acme).update(window=4)
    assert withdrawn() == [False, False, True, True]  # 4 // 2: the newest two go


def test_a_tenants_failing_hooks_do_not_hold_another_tenants_hooks(acme, globex, clock, monkeypatch):
    real = LocalRunner.launch

    def launch(self, spec):
        if spec.labels["conveyor.io/tenant"] == acme.slug:
            raise TransientResourceError("0/3 nodes are available: acme's hooks ask for 64 CPUs")
        return real(self, spec)

    monkeypatch.setattr(LocalRunner, "launch", launch)
    for n in range(3):
        services.start_ingest(builders.source(acme, f"feed{n}", batches=1))
    jobs.run_until_idle()  # each of acme's hooks fails once: its breaker opens
    assert RunnerBreaker.objects.get(tenant=acme).state == BreakerState.OPEN

    run = services.start_ingest(builders.source(globex, batches=2))
    jobs.run_until_idle()  # the clock has not moved: nothing of acme's is due

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert set(HookExecution.objects.filter(batch__run=run).values_list("tries", flat=True)) == {1}
    assert RunnerBreaker.objects.get(tenant=globex).state == BreakerState.CLOSED
