"""``manage.py demo``: each pipeline's demo, loaded once through the services an operator
uses, by name or all of them in order."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

import jobs
from devtools.fakes.market_api import FakeMarket
from exports.models import ExportJob, Snapshot, TrinoBinding
from factors import aggregation, stats
from factors.models import CarbonReport, DataEntry, EmissionFactor
from ingest.runs.models import HookExecution, IngestRun
from jobs.models import Job, JobEvent, Worker
from jobs.testing import wait_until
from market import freshness
from market.models import DailyBar, MarketFeed
from tests.support.base import staff


def demo(*args: str) -> str:
    out = io.StringIO()
    call_command("demo", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def market():
    """The fake market-data API, its today the market's by the engine's clock (a test's
    clock when the test asks for it first)."""
    with FakeMarket(instruments=20, today=freshness.market_date(jobs.now())) as server:
        yield server


# --- factors -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_factors_demo_loads_a_filled_report_once(clock):
    output = demo("factors")

    assert "Demo loaded" in output
    chem = CarbonReport.objects.get(unit__code="DEMO-CHEM", year=2024)
    assert chem.stats["entries"] > 3000 and chem.stats["without_factor"] > 0
    assert set(chem.stats["by_module"]) == {"travel", "energy", "purchases"}
    for mod in chem.modules.all():
        assert mod.stats == stats.module_stats(aggregation.module_totals(mod.pk))
    assert DataEntry.objects.count() > 6000
    assert EmissionFactor.objects.values("data_entry_type").distinct().count() == 7
    assert not Job.objects.exclude(state=Job.State.SUCCEEDED).exists()

    assert demo("factors") == "The demo is already loaded.\n"


# --- ingest --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_ingest_demo_makes_a_source_and_a_finished_run_once():
    output = demo("ingest")

    run = IngestRun.objects.get()
    assert (run.status, run.batches_published, run.records_published) == ("succeeded", 5, 120)
    assert "every record passed" in HookExecution.objects.first().log_tail
    hook = run.source.hooks.get()  # an entry of the catalogue, with its parameters
    assert (hook.template.name, hook.template.enabled) == ("check-records", True)
    assert hook.parameters == {"require": "id,amount", "unique": "id"}
    assert f"run {run.pk} of demo-orders published 120 records in 5 batches" in output
    assert "already loaded" in demo("ingest")
    assert IngestRun.objects.count() == 1


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_the_ingest_demo_leaves_its_run_to_a_running_cluster_and_reports_when_it_finished(
    settings,
    processes,
):
    worker = processes.manage(
        "worker",
        "jobs_worker",
        env=processes.env(INGEST_FILE_ROOTS=settings.INGEST_FILE_ROOTS[0], JOBS_HEARTBEAT_SECONDS="0.5"),
    )
    wait_until(lambda: Worker.objects.exists() or worker.exited(), 60, "the cluster's worker to start")
    cluster = set(Worker.objects.values_list("name", flat=True))

    output = demo("ingest", "--wait", "120")

    run = IngestRun.objects.get()
    assert (run.status, run.batches_published, run.records_published) == ("succeeded", 5, 120)
    assert "a cluster is running, waiting for it to finish the run (at most 120 s)" in output
    assert f"run {run.pk} of demo-orders published 120 records in 5 batches" in output
    # Every job of the run was the cluster's: none was taken here, racing its worker.
    claimed = set(
        JobEvent.objects.filter(job__pipeline_id=run.pipeline, kind="claimed").values_list(
            "worker", flat=True
        )
    )
    assert claimed and claimed <= cluster, (claimed, cluster)


@pytest.mark.django_db
def test_the_ingest_demo_says_a_run_the_cluster_has_not_finished_is_still_running():
    # A cluster's worker, as its heartbeat shows it, that claims nothing in this test.
    Worker.objects.create(
        name="elsewhere", hostname="node-2", pid=1, started_at=jobs.now(), last_seen_at=jobs.now()
    )

    output = demo("ingest", "--wait", "0")

    run = IngestRun.objects.get()
    assert run.status == "running"
    assert (
        f"run {run.pk} of demo-orders is still running after 0 s; the cluster carries it on. "
        f"Follow it with `manage.py ingest_status {run.pk}`."
    ) in output


# --- market --------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_market_demo_loads_its_feeds_last_week_once(clock, market):
    output = demo("market", "--api-url", market.url)

    feed = MarketFeed.objects.get(name="demo-market")
    assert (feed.api_url, feed.token, feed.tenant.slug) == (market.url, "demo-token", "demo")
    days = DailyBar.objects.filter(feed=feed).values("trade_date").distinct().count()
    assert days >= 5  # a week back from Monday 2026-11-02, October's holidays long past
    assert f"Market demo: feed demo-market has {days} trading day(s) of bars" in output
    assert demo("market", "--api-url", market.url) == "The market demo is already loaded.\n"


@pytest.mark.django_db
def test_the_market_demo_needs_the_apis_address():
    with pytest.raises(CommandError, match="the market demo needs --api-url"):
        demo("market")
    with pytest.raises(CommandError, match="the market demo needs --api-url"):
        demo()  # all of them
    assert not MarketFeed.objects.exists()


# --- exports -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_exports_demo_queues_one_snapshot_of_datasets_once():
    """Its entities are datasets: the demo needs no Trino binding."""
    output = demo("exports") + demo("exports")

    snap = Snapshot.objects.get()
    assert "is queued" in output and "already queued" in output
    assert set(ExportJob.objects.values_list("engine", "starburst_role")) == {("postgres", "")}
    assert snap.mapping.name == "demo-export" and not TrinoBinding.objects.exists()


# --- all of them ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_all_the_demos_load_in_order_as_the_named_user(market):
    admin = staff("admin")

    output = demo("--api-url", market.url, "--user", "admin")

    lines = output.splitlines()
    firsts = [
        next(i for i, line in enumerate(lines) if line.startswith(prefix))
        for prefix in ("Demo loaded", "Ingest demo:", "Market demo:", "Export demo:")
    ]
    assert firsts == sorted(firsts), output
    assert IngestRun.objects.get().started_by == admin
    assert Snapshot.objects.get().created_by == admin
    assert demo("all", "--api-url", market.url).splitlines() == [
        "The demo is already loaded.",
        "The ingest demo is already loaded.",
        "The market demo is already loaded.",
        "The export demo is already queued.",
    ]


@pytest.mark.django_db
def test_a_user_that_does_not_exist_is_refused_before_anything_is_loaded():
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        demo("exports", "--user", "nobody")
    assert not Snapshot.objects.exists()
