from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client import Counter, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from jobs import metrics
from tests.support.base import make_job, run_next, staff, tenant
from tests.support.jobs.builders import ON_ORDER, failing

pytestmark = pytest.mark.django_db


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse an exposition into {(sample name, sorted labels): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def jobs_gauge(body: bytes, state: str, type_name: str) -> float | None:
    return samples(body).get(("conveyor_jobs", (("state", state), ("type", type_name))))


@pytest.fixture
def operator_client() -> Client:
    client = Client()
    client.force_login(staff("olga", operator=True))
    return client


def test_it_exposes_job_counts_by_state_and_type(clock, operator_client):
    make_job("tests.noop")
    make_job("tests.noop")
    make_job("tests.keyed")
    run_next()

    response = operator_client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert jobs_gauge(response.content, "pending", "tests.noop") == 1
    assert jobs_gauge(response.content, "succeeded", "tests.noop") == 1
    assert jobs_gauge(response.content, "pending", "tests.keyed") == 1


def test_it_exposes_the_engines_counters(clock, operator_client):
    make_job("tests.noop")
    before = samples(operator_client.get("/metrics").content)
    metrics.claimed(1)
    metrics.finished("tests.noop", "succeeded", 0.2)

    after = samples(operator_client.get("/metrics").content)

    claimed = ("conveyor_jobs_claimed_total", ())
    outcome = ("conveyor_jobs_outcomes_total", (("outcome", "succeeded"), ("type", "tests.noop")))
    assert after[claimed] == before[claimed] + 1
    assert after[outcome] == before.get(outcome, 0) + 1
    assert ("conveyor_job_duration_seconds_count", (("type", "tests.noop"),)) in after


def test_anonymous_scrapes_are_refused_by_default():
    response = Client().get("/metrics")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"conveyor_jobs" not in response.content


def test_a_tenants_staff_cannot_read_every_tenants_figures():
    client = Client()
    client.force_login(staff("alice", of=tenant("Acme")))

    assert client.get("/metrics").status_code == 403


def test_a_non_staff_operator_is_refused():
    client = Client()
    client.force_login(staff("otto", operator=True, is_staff=False))

    assert client.get("/metrics").status_code == 403


def test_the_metrics_token_lets_a_scraper_in(clock, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    make_job("tests.noop")

    good = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    bad = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer guess")

    assert good.status_code == 200
    assert jobs_gauge(good.content, "pending", "tests.noop") == 1
    assert bad.status_code == 401


def test_without_a_configured_token_no_bearer_header_gets_in(settings):
    settings.METRICS_TOKEN = ""

    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_metrics_public_allows_anonymous_scrapes(clock, settings):
    settings.METRICS_PUBLIC = True
    make_job("tests.noop")

    response = Client().get("/metrics")

    assert response.status_code == 200
    assert jobs_gauge(response.content, "pending", "tests.noop") == 1


def test_multiprocess_mode_sums_the_counters_of_every_process(
    clock, operator_client, tmp_path, monkeypatch, settings
):
    # The library's counters write where the variable says; /metrics reads the setting.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    settings.PROMETHEUS_MULTIPROC_DIR = str(tmp_path)
    make_job("tests.noop")
    # Two "processes" writing their counters to the shared directory, as cluster
    # workers do when PROMETHEUS_MULTIPROC_DIR is set before prometheus_client loads.
    for pid in (101, 102):
        monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda pid=pid: pid))
        Counter("conveyor_test_claims", "test", registry=None).inc(pid - 100)

    body = operator_client.get("/metrics").content

    assert samples(body)[("conveyor_test_claims_total", ())] == 3
    assert jobs_gauge(body, "pending", "tests.noop") == 1


def test_it_speaks_openmetrics_when_asked(clock, operator_client):
    make_job("tests.noop")

    response = operator_client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")

    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


def test_metrics_show_each_subscribers_undelivered_and_oldest(clock, operator_client):
    failing()
    clock.advance(30)

    body = operator_client.get("/metrics").content

    label = (("subscriber", ON_ORDER),)
    assert samples(body)[("conveyor_outbox_undelivered", label)] == 1
    assert samples(body)[("conveyor_outbox_oldest_undelivered_seconds", label)] == 30


class Scrapes:
    """A collector an app would register: a gauge of how many times it was built."""

    built = 0

    def __init__(self) -> None:
        Scrapes.built += 1

    def collect(self):
        yield GaugeMetricFamily("tests_scrapes", "Scrapes seen by this collector.", value=Scrapes.built)


@pytest.fixture
def registered_scrapes():
    metrics.register_collector(Scrapes)
    metrics.register_collector(Scrapes)  # once only: an app's ready() may run twice
    yield
    metrics._app_collectors.remove(Scrapes)


def test_a_collector_an_app_registers_is_built_and_read_at_each_scrape(operator_client, registered_scrapes):
    Scrapes.built = 0
    first = samples(operator_client.get("/metrics").content)
    second = samples(operator_client.get("/metrics").content)

    assert (first[("tests_scrapes", ())], second[("tests_scrapes", ())]) == (1, 2)


def test_the_apps_register_their_collectors_when_they_are_ready():
    from exports.metrics import ExportCollector
    from ingest.runs.metrics import BreakerCollector

    assert metrics.app_collectors() == [BreakerCollector, ExportCollector]
