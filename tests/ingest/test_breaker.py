"""The hook runner's circuit breaker: opens on a burst of transient failures, holds
every launch back until its probe time, lets one probe through, closes on success and
backs off further on a failed probe."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ingest.runs import breaker
from ingest.runs.models import BreakerState, RunnerBreaker
from jobs.testing import T0

TARGET = "kubernetes:cluster.example/conveyor-hooks"
RULES = {"INGEST_BREAKER_THRESHOLD": 3, "INGEST_BREAKER_WINDOW_SECONDS": 60,
         "INGEST_BREAKER_COOLDOWN_SECONDS": 30, "INGEST_BREAKER_MAX_COOLDOWN_SECONDS": 100}

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rules")]


@pytest.fixture
def rules():
    with override_settings(**RULES):
        yield


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def _open_it(start: float = 0) -> None:
    for n in range(3):
        breaker.record_failure(TARGET, 100 + n, "0/3 nodes are available", at(start + n))


def test_a_closed_breaker_admits_and_records_a_success_in_one_statement_each(
        django_assert_max_num_queries):
    with django_assert_max_num_queries(1):
        assert breaker.admit(TARGET, 1, at(0)).allowed
    with django_assert_max_num_queries(1):
        breaker.record_success(TARGET, 1, at(0))
    assert RunnerBreaker.objects.get(target=TARGET).window == 9  # one more launch may wait
    breaker.record_success(TARGET, 1, at(1))
    assert RunnerBreaker.objects.get(target=TARGET).window == 10
    RunnerBreaker.objects.filter(target=TARGET).update(window=1024)
    breaker.record_success(TARGET, 1, at(2))
    widest = RunnerBreaker.objects.get(target=TARGET)
    assert (widest.window, widest.updated_at) == (1024, at(1))  # nothing left to write


def test_an_admission_is_settled_only_when_a_success_would_change_nothing():
    assert not breaker.admit(TARGET, 1, at(0)).settled  # no row yet: a success creates it
    breaker.record_success(TARGET, 1, at(0))
    assert not breaker.admit(TARGET, 1, at(1)).settled  # the window can still widen
    RunnerBreaker.objects.filter(target=TARGET).update(window=1024)
    assert breaker.admit(TARGET, 1, at(2)).settled
    breaker.record_failure(TARGET, 2, "evicted", at(3))
    RunnerBreaker.objects.filter(target=TARGET).update(window=1024)
    assert not breaker.admit(TARGET, 1, at(4)).settled  # a success clears the failure count


def test_failures_below_the_threshold_or_spread_beyond_the_window_keep_it_closed():
    breaker.record_failure(TARGET, 1, "evicted", at(0))
    breaker.record_failure(TARGET, 2, "evicted", at(10))
    breaker.record_failure(TARGET, 3, "evicted", at(80))  # the window started again
    row = RunnerBreaker.objects.get(target=TARGET)
    assert (row.state, row.failures) == (BreakerState.CLOSED, 1)


def test_a_burst_opens_it_and_every_launch_waits_for_the_probe_time():
    _open_it()
    row = RunnerBreaker.objects.get(target=TARGET)
    assert row.state == BreakerState.OPEN
    assert row.next_probe_at == at(2 + 30)
    held = breaker.admit(TARGET, 7, at(10))
    assert not held.allowed and held.wait_seconds == pytest.approx(22)
    assert breaker.admit(TARGET, 8, at(31)).allowed is False
    assert RunnerBreaker.objects.get(target=TARGET).denied == 2


def test_one_probe_at_a_time_and_its_success_closes_it():
    _open_it()
    probe = breaker.admit(TARGET, 7, at(40))
    assert probe.allowed and probe.probe
    assert not breaker.admit(TARGET, 8, at(41)).allowed
    assert breaker.admit(TARGET, 7, at(42)).allowed  # the probe polling its own hook
    breaker.record_success(TARGET, 7, at(43))
    row = RunnerBreaker.objects.get(target=TARGET)
    assert (row.state, row.failures, row.probe_job) == (BreakerState.CLOSED, 0, None)
    assert breaker.admit(TARGET, 8, at(44)).allowed


def test_a_failed_probe_reopens_it_for_twice_as_long_up_to_the_cap():
    _open_it()
    now = 40
    cooldowns = []
    for _ in range(4):
        assert breaker.admit(TARGET, 7, at(now)).probe
        row = breaker.record_failure(TARGET, 7, "still full", at(now))
        cooldowns.append(row.cooldown_seconds)
        now = (row.next_probe_at - T0).total_seconds()
    assert cooldowns == [60, 100, 100, 100]
    assert RunnerBreaker.objects.get(target=TARGET).times_opened == 5


def test_a_probe_whose_worker_vanished_is_handed_on():
    _open_it()
    assert breaker.admit(TARGET, 7, at(40)).probe
    assert not breaker.admit(TARGET, 8, at(100)).allowed
    late = at(40) + breaker.PROBE_GRACE + timedelta(seconds=1)
    assert breaker.admit(TARGET, 8, late).probe


def test_failures_elsewhere_while_open_do_not_move_the_probe_time():
    _open_it()
    breaker.record_failure(TARGET, 50, "evicted", at(5))
    assert RunnerBreaker.objects.get(target=TARGET).next_probe_at == at(32)


def test_an_operator_can_close_it():
    _open_it()
    breaker.reset(TARGET, at(5))
    assert breaker.admit(TARGET, 9, at(6)).allowed


class BreakerMachine(RuleBasedStateMachine):
    """Any sequence of launches, failures, successes and time: at most one probe is out,
    nothing launches while the breaker is open before its probe time, and the cool-down
    stays within its bounds."""

    @initialize()
    def start(self):
        RunnerBreaker.objects.all().delete()
        self.now = 0.0

    @rule(seconds=st.floats(min_value=0, max_value=200))
    def wait(self, seconds):
        self.now += seconds

    @rule(job=st.integers(1, 5))
    def launch(self, job):
        before = RunnerBreaker.objects.filter(target=TARGET).first()
        admitted = breaker.admit(TARGET, job, at(self.now))
        if before is not None and before.state == BreakerState.OPEN and at(self.now) < before.next_probe_at:
            assert not admitted.allowed
        if admitted.probe:
            row = RunnerBreaker.objects.get(target=TARGET)
            assert (row.state, row.probe_job) == (BreakerState.HALF_OPEN, job)

    @rule(job=st.integers(1, 5))
    def fail(self, job):
        breaker.record_failure(TARGET, job, "pressure", at(self.now))

    @rule(job=st.integers(1, 5))
    def succeed(self, job):
        breaker.record_success(TARGET, job, at(self.now))

    @invariant()
    def bounded(self):
        row = RunnerBreaker.objects.filter(target=TARGET).first()
        if row is None:
            return
        assert 0 <= row.cooldown_seconds <= 100
        assert (row.state == BreakerState.HALF_OPEN) == (row.probe_job is not None)
        if row.state != BreakerState.CLOSED:
            assert row.next_probe_at is not None


@pytest.mark.django_db
def test_the_breaker_keeps_its_rules_whatever_happens(rules):
    BreakerMachine.TestCase.settings = settings(
        max_examples=60, stateful_step_count=25, deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture])
    BreakerMachine.TestCase().runTest()


def test_the_breaker_is_on_the_metrics_page(clock, settings):
    from django.test import Client
    from prometheus_client.parser import text_string_to_metric_families

    settings.METRICS_PUBLIC = True
    _open_it()
    body = Client().get("/metrics").content.decode()
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in text_string_to_metric_families(body) for s in family.samples}
    assert found[("conveyor_hook_breaker_state", (("state", "open"), ("target", TARGET)))] == 1
    assert found[("conveyor_hook_breaker_state", (("state", "closed"), ("target", TARGET)))] == 0
    assert found[("conveyor_hook_breaker_opened_total", (("target", TARGET),))] == 1
    # The clock stands at T0, the probe is due 32 s later.
    assert found[("conveyor_hook_breaker_next_probe_seconds", (("target", TARGET),))] == 32
