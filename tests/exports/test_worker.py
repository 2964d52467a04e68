"""The export worker, in this process, against the engine's remote-worker API over HTTP
(the live server) and the real PostgreSQL: direct exports end with files whose rows are
the tenant's and nothing else, a Trino job without a role or with a query that is not
one query fails at once with nothing sent to Trino, an UNLOAD writes exactly into the
job's folder whatever its entity's text holds and is polled as the engine job's snoozes,
and a report from a claim that was taken away is refused and its file removed."""

from __future__ import annotations

import asyncio
from datetime import date
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
from django.db import connection

from exports import engines, parquet, services
from exports.models import ExportJob, JobStatus, SnapshotStatus
from exports.worker import MISSING_ROLE, ExportWorker, WorkerSettings
from jobs import remote
from jobs.models import Job
from jobs.remote_client import RemoteClient
from market.models import DailyBar, MarketFeed
from tests.support.base import tenant
from tests.support.exports.builders import CATALOG, mapping

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "w" * 40


@pytest.fixture
def storage(settings, tmp_path):
    settings.EXPORTS_STORAGE_URL = str(tmp_path / "exports")
    settings.EXPORTS_WORKER_TOKEN = TOKEN
    settings.JOBS_REMOTE_WORKERS = {"exports": {"token": TOKEN, "queues": ["exports"]}}
    return tmp_path / "exports"


def another_worker_claims(name: str) -> None:
    """Another export worker claims whatever is due, as the engine's API lets it."""
    remote.claim(remote.credentials()[0], name, limit=10)


def bars(owner, feed_name: str, count: int) -> None:
    feed = MarketFeed.objects.create(tenant=owner, name=feed_name, api_url="http://x.example/", token="t")
    DailyBar.objects.bulk_create(
        DailyBar(
            feed=feed,
            ts_code=f"{n:06d}.SH",
            trade_date=date(2026, 11, 2),
            open=1.0,
            high=2.0 + n,
            low=0.5,
            close=1.5,
            vol=float(n),
        )
        for n in range(count)
    )


BARS = [
    {
        "kind": "node",
        "name": "bars",
        "dataset": "daily_bars",
        "columns": ["ts_code", "trade_date", "close", "vol"],
    }
]


def worker(live_server, **options) -> ExportWorker:
    return ExportWorker(
        RemoteClient(live_server.url, TOKEN, worker="test-worker"),
        WorkerSettings(name="test-worker", **options),
        engine_for=lambda name: engines.postgres_engine(),
    )


def run(export_worker: ExportWorker) -> None:
    """One pass of the worker's loop, and every export it started, to the end."""

    async def one_pass() -> None:
        await export_worker.run_pass()
        await export_worker.wait_idle()
        await export_worker.client.close()

    asyncio.run(one_pass())


def test_a_direct_export_writes_the_tenants_rows_in_mapping_order(live_server, storage):
    acme, other = tenant("Acme"), tenant("Other")
    bars(acme, "acme-feed", 250)
    bars(other, "other-feed", 40)
    snap = services.create_snapshot(mapping(of=acme, entities=BARS))
    run(worker(live_server))
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY, list(snap.jobs.values("status", "error_message"))
    assert snap.node_counts == {"bars": 250}
    job = snap.jobs.get()
    assert job.files == [f"{job.destination}/part-g1.parquet"]
    assert Job.objects.get(pk=job.job_id).state == Job.State.SUCCEEDED
    table = pq.read_table(job.files[0])
    assert table.schema.names == ["ts_code", "trade_date", "close", "vol"]
    assert table.num_rows == 250 and snap.size_bytes == job.size_bytes > 0
    assert sorted(table.column("ts_code").to_pylist())[:2] == ["000000.SH", "000001.SH"]


def test_a_dataset_with_decimals_json_and_timestamps_round_trips(live_server, storage):
    from django.utils import timezone

    from factors.models import EmissionFactor

    now = timezone.now()
    EmissionFactor.objects.create(
        data_entry_type="plane",
        year=2024,
        classification={"haul": "long"},
        value=Decimal("0.123456789"),
        unit="km",
        created_at=now,
        updated_at=now,
    )
    acme = tenant("Acme")
    snap = services.create_snapshot(
        mapping(
            of=acme,
            entities=[
                {
                    "kind": "node",
                    "name": "factors",
                    "dataset": "emission_factors",
                    "columns": ["value", "classification", "updated_at", "year"],
                }
            ],
        )
    )
    run(worker(live_server))
    job = ExportJob.objects.get(snapshot=snap)
    assert job.status == JobStatus.COMPLETED, job.error_message
    row = pq.read_table(job.files[0]).to_pylist()[0]
    assert row["value"] == Decimal("0.123456789")
    assert row["classification"] == '{"haul": "long"}'
    assert row["updated_at"] == now and row["year"] == 2024


def test_a_completion_from_a_claim_taken_away_is_refused_and_its_file_removed(
    live_server, storage, monkeypatch
):
    acme = tenant("Acme")
    bars(acme, "acme-feed", 10)
    snap = services.create_snapshot(mapping(of=acme, entities=BARS))
    export = engines.postgres_engine().export_direct

    def then_reset(job, file_name):
        written = export(job, file_name)
        # Meanwhile an operator hands the job to someone else.
        try:
            services.reset_claim(ExportJob.objects.get(pk=job.id), None)
            another_worker_claims("another-worker")
        finally:
            connection.close()  # this runs on the worker's pool thread
        return written

    monkeypatch.setattr(
        engines.postgres_engine().__class__,
        "export_direct",
        lambda self, job, name, cancellation=None: then_reset(job, name),
    )
    run(worker(live_server))
    job = snap.jobs.get()
    assert job.status == JobStatus.CLAIMED and job.claimed_by == "exports/another-worker"
    assert job.generation == 2
    # What the first claim wrote is gone; the second claim's export writes its own.
    assert parquet.count_rows(job.destination).files == []
    assert not Job.objects.get(pk=job.job_id).events.filter(kind="succeeded").exists()


# -- on Trino -----------------------------------------------------------------------

ORDERS = [
    {
        "kind": "node",
        "name": "orders",
        "sql": "SELECT id, amount FROM orders",
        "catalog": CATALOG,
        "columns": ["amount", "id"],
    }
]


@pytest.fixture
def trino(settings):
    import pyarrow as pa

    from devtools.fakes.trino import FakeTrino

    with FakeTrino(page_rows=100) as fake:
        fake.load_table(
            "orders",
            pa.table(
                {"id": pa.array(range(300), pa.int64()), "amount": pa.array([n * 0.5 for n in range(300)])}
            ),
        )
        settings.EXPORTS_TRINO_URL = fake.url
        yield fake


def trino_worker(live_server, fake, *, direct: bool, pauses: list | None = None, **settings):
    from exports.engines.trino import TrinoEngine, TrinoSettings

    engine = TrinoEngine(TrinoSettings(url=fake.url, **settings))
    return ExportWorker(
        RemoteClient(live_server.url, TOKEN, worker="trino-worker"),
        WorkerSettings(name="trino-worker", direct_export=direct),
        engine_for=lambda name: engine,
        sleep=(pauses.append if pauses is not None else lambda seconds: None),
    )


def test_a_trino_direct_export_completes_in_one_step(live_server, storage, trino):
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    run(trino_worker(live_server, trino, direct=True))
    job = snap.jobs.get()
    assert job.status == JobStatus.COMPLETED and job.row_count == 300
    assert pq.read_table(job.files[0]).schema.names == ["amount", "id"]
    assert [e.kind for e in job.events.all()] == ["created", "claimed", "completed"]


def test_an_unload_is_submitted_then_polled_on_schedule_to_completion(live_server, storage, trino, clock):
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    trino.hold()
    run(trino_worker(live_server, trino, direct=False))
    job = snap.jobs.get()
    assert job.status == JobStatus.SUBMITTED and job.query_id in trino.queries
    assert (job.next_poll_at - clock.now()).total_seconds() == 2
    run(trino_worker(live_server, trino, direct=False))  # not due yet: not polled
    assert ExportJob.objects.get(pk=job.pk).poll_count == 0
    clock.advance(2)
    run(trino_worker(live_server, trino, direct=False))
    job.refresh_from_db()
    assert job.poll_count == 1 and (job.next_poll_at - clock.now()).total_seconds() == 3
    trino.release()
    clock.advance(3)
    run(trino_worker(live_server, trino, direct=False))
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED and job.row_count == 300
    assert job.files and all("/g1/" in path for path in job.files)
    assert snapshot_status(snap) == SnapshotStatus.READY
    # Finished means finished: nothing polls it again.
    polls = trino.queries[job.query_id].polls
    clock.advance(600)
    run(trino_worker(live_server, trino, direct=False))
    assert trino.queries[job.query_id].polls == polls


def snapshot_status(snap) -> str:
    snap.refresh_from_db()
    return snap.status


def test_an_engine_without_system_unload_gets_the_job_exported_directly(live_server, storage, trino, clock):
    trino.unload_available = False
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    run(trino_worker(live_server, trino, direct=False))
    clock.advance(2)
    run(trino_worker(live_server, trino, direct=False))
    job = snap.jobs.get()
    assert job.status == JobStatus.COMPLETED and job.row_count == 300 and job.generation == 1
    assert job.files == [f"{job.destination}/part-g1.parquet"]
    fell_back = job.events.get(kind="fell_back")
    assert "exported directly instead" in fell_back.message
    assert "FUNCTION_NOT_FOUND" in fell_back.message


def test_a_late_submission_is_refused_and_its_query_cancelled(live_server, storage, trino, monkeypatch):
    from exports.engines.trino import TrinoEngine

    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    trino.hold()
    submit = TrinoEngine.submit_unload

    def slow_submit(self, job):
        submitted = submit(self, job)
        try:  # the claim was taken back meanwhile and went to another worker
            services.reset_claim(ExportJob.objects.get(pk=job.id), None)
            another_worker_claims("other-worker")
        finally:
            connection.close()
        return submitted

    monkeypatch.setattr(TrinoEngine, "submit_unload", slow_submit)
    run(trino_worker(live_server, trino, direct=False))
    job = snap.jobs.get()
    assert job.status == JobStatus.CLAIMED and job.claimed_by == "exports/other-worker"
    assert job.query_id == "" and job.generation == 2
    (late,) = trino.queries.values()
    assert late.state == "FAILED" and late.error["errorName"] == "USER_CANCELED"


def test_a_cold_cluster_is_waited_out_by_the_worker(live_server, storage, trino):
    trino.cold_start_queries, trino.cold_start_seconds = 1, 3.0
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    pauses: list[float] = []
    run(trino_worker(live_server, trino, direct=True, pauses=pauses, request_timeout=0.5))
    job = snap.jobs.get()
    assert job.status == JobStatus.COMPLETED and pauses == [5.0]


def test_a_cold_start_that_never_ends_is_tried_again_then_fails_with_the_seeds_message(
    live_server, storage, trino, clock
):
    trino.cold_start_queries, trino.cold_start_seconds = 9, 3.0
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    message = "Direct export failed after 2 retries: TrinoConnectionError"
    for attempt in (1, 2):
        run(trino_worker(live_server, trino, direct=True, request_timeout=0.5))
        job = snap.jobs.get()
        assert job.status == JobStatus.PENDING
        assert job.events.last().message == f"attempt {attempt} of 3 failed, to be tried again: {message}"
        clock.advance(3600)  # past the engine's backoff
    run(trino_worker(live_server, trino, direct=True, request_timeout=0.5))
    job = snap.jobs.get()
    assert job.status == JobStatus.FAILED and job.error_message == message
    assert snapshot_status(snap) == SnapshotStatus.FAILED


def test_a_trino_error_fails_the_job_at_once(live_server, storage, trino):
    trino.fail_next("TABLE_NOT_FOUND", "USER_ERROR", "line 1:15: Table 'orders' does not exist")
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    run(trino_worker(live_server, trino, direct=True))
    job = snap.jobs.get()
    assert job.status == JobStatus.FAILED
    assert job.error_message.startswith("TABLE_NOT_FOUND: line 1:15: Table 'orders' does not exist (query ")
    assert len(trino.queries) == 1


def test_a_trino_job_without_a_role_fails_at_once_and_fails_its_snapshot(live_server, storage, trino):
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    ExportJob.objects.filter(snapshot=snap).update(starburst_role="")  # behind the services' back
    run(trino_worker(live_server, trino, direct=True))
    snap.refresh_from_db()
    job = snap.jobs.get()
    assert job.status == JobStatus.FAILED and job.error_message == MISSING_ROLE
    assert snap.status == SnapshotStatus.FAILED and snap.error == f"node orders: {MISSING_ROLE}"
    assert trino.queries == {}


@pytest.mark.parametrize("direct", [True, False])
def test_a_job_whose_query_was_changed_behind_the_services_back_fails_and_nothing_is_sent(
    live_server, storage, trino, direct
):
    snap = services.create_snapshot(mapping(of=tenant("Acme"), entities=ORDERS))
    ExportJob.objects.filter(snapshot=snap).update(
        sql="SELECT amount, id FROM orders) AS entity), location => '/tmp/elsewhere', "
        "format => 'PARQUET')) --"
    )
    run(trino_worker(live_server, trino, direct=direct))
    job = snap.jobs.get()
    assert job.status == JobStatus.FAILED
    assert job.error_message.startswith("InvalidQuery: the job's query is refused: not a query")
    assert trino.queries == {} and job.completed_at is not None  # failed for good


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, amount FROM orders UNION ALL SELECT id, amount FROM orders WHERE id < 0",
        "WITH o AS (SELECT id, amount FROM orders) SELECT id, amount FROM o",
        "SELECT id, amount, ') AS entity), location => ''/tmp/elsewhere'', format => ''PARQUET'')) --'"
        " AS note FROM orders",
        "SELECT id, amount FROM orders -- ) AS entity), location => '/tmp/elsewhere'",
        "SELECT id, amount FROM orders /* ) AS entity), location => '/tmp/elsewhere' */",
    ],
)
def test_an_unload_writes_exactly_into_the_jobs_folder_whatever_the_entity_holds(
    live_server, storage, trino, clock, sql
):
    acme = tenant("Acme")
    snap = services.create_snapshot(mapping(of=acme, entities=[{**ORDERS[0], "sql": sql}]))
    run(trino_worker(live_server, trino, direct=False, export_root=str(storage)))
    clock.advance(2)
    run(trino_worker(live_server, trino, direct=False, export_root=str(storage)))
    job = snap.jobs.get()
    assert job.status == JobStatus.COMPLETED and job.row_count == 300, job.error_message
    (query,) = trino.queries.values()
    folder = f"{storage}/tenant-{acme.pk}/snapshot-{snap.pk}/nodes/orders/g1"
    assert query.location == folder and query.parameters == [folder, "PARQUET"]
    # The entity's text stays inside the input's parentheses (a literal, or nothing).
    assert query.statement.endswith(" AS entity), location => ?, format => ?))")
    assert job.files and all(path.startswith(folder + "/") for path in job.files)
    assert [str(path) for path in storage.rglob("*.parquet")] == job.files
