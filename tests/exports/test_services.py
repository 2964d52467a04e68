"""The export jobs' state machine on the engine: snapshots from mappings (their queries
checked, their role and catalogs the tenant's binding), each export an engine job that
remote workers claim (nodes before edges, oldest snapshot first, never twice), the
hooks that keep the row in step with the engine (completions whose files must lie in
the job's folder, submissions polled on the Fibonacci table, failures handed back or
final, operators' actions from any door), and snapshots finishing with their last job.
The engine's own fencing of late words is tested in tests/jobs/test_remote_workers.py;
here, that a fenced word leaves the export row as it was."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from hypothesis import given
from hypothesis import strategies as st

from exports import services
from exports.models import (
    EventKind,
    ExportEvent,
    ExportJob,
    JobStatus,
    Mapping,
    MappingEntity,
    Snapshot,
    SnapshotStatus,
)
from exports.spec import JobSpec, relative_inside
from jobs import engine, reaper, remote
from jobs.errors import IllegalTransition, InvalidArgument
from jobs.models import Job, JobEvent
from tests.support.base import staff
from tests.support.exports.builders import (
    CATALOG,
    CREDENTIAL,
    binding,
    claim_jobs,
    complete,
    jobs_of,
    mapping,
    polled_jobs,
    report,
    snapshot,
    write_part,
)

pytestmark = pytest.mark.django_db


def test_a_snapshot_has_one_job_per_entity_nodes_first():
    snap = snapshot()
    made = jobs_of(snap)
    assert [(job.job_type, job.entity_name) for job in made] == [
        ("node", "entries"),
        ("node", "factors"),
        ("edge", "computed_with"),
    ]
    entries = made[0]
    # A dataset's job runs on PostgreSQL: no Trino role is involved.
    assert entries.engine == "postgres" and entries.starburst_role == ""
    assert entries.column_names == ["id", "quantity", "classification", "created_at"]
    assert entries.column_types == ["bigint", "decimal(18,6)", "json", "timestamp(6) with time zone"]
    # The tenant filter is written in, from the snapshot's tenant, not from any input.
    assert f"u.tenant_id = {snap.tenant_id}" in entries.sql
    assert entries.destination.endswith(f"tenant-{snap.tenant_id}/snapshot-{snap.pk}/nodes/entries")
    assert snap.status == SnapshotStatus.PENDING


def test_each_export_is_its_own_engine_job_on_the_exports_queue_in_claim_order():
    snap = snapshot()
    made = jobs_of(snap)
    linked = [Job.objects.get(pk=row.job_id) for row in made]
    assert len({job.pk for job in linked}) == 3
    for row, job in zip(made, linked, strict=True):
        assert (job.type, job.queue, job.state, job.payload) == (
            services.EXPORT_TYPE,
            services.QUEUE,
            Job.State.PENDING,
            {"export": row.pk},
        )
        assert job.tenant_id == snap.tenant_id and job.max_attempts == 3
    # Enqueued in position order: the engine claims by id, so nodes go before edges.
    assert [job.pk for job in linked] == sorted(job.pk for job in linked)
    assert (
        list(ExportEvent.objects.filter(job__snapshot=snap).values_list("kind", flat=True))
        == [EventKind.CREATED] * 3
    )


def test_a_mapping_naming_an_unknown_dataset_or_column_is_refused_whole():
    bad = mapping(entities=[{"kind": "node", "name": "x", "dataset": "payroll", "columns": ["id"]}])
    with pytest.raises(services.InvalidMapping, match="node x: no dataset 'payroll'"):
        services.create_snapshot(bad)
    bad = mapping(
        "m2", entities=[{"kind": "node", "name": "u", "dataset": "units", "columns": ["id", "password"]}]
    )
    with pytest.raises(services.InvalidMapping, match="node u: dataset units has no column 'password'"):
        services.create_snapshot(bad)
    assert not ExportJob.objects.exists()


def test_a_query_entity_needs_trino(settings):
    settings.EXPORTS_TRINO_URL = ""
    query = mapping(
        entities=[
            {
                "kind": "node",
                "name": "orders",
                "sql": "SELECT 1 AS id -- one\n",
                "catalog": CATALOG,
                "columns": ["id"],
            }
        ]
    )
    with pytest.raises(services.InvalidMapping, match="no Trino is configured"):
        services.create_snapshot(query)
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    job = jobs_of(services.create_snapshot(query))[0]
    assert job.engine == "trino" and job.starburst_role == "analytics" and job.catalog == CATALOG
    # Written back from the parse tree: the comment is gone.
    assert job.sql == 'SELECT "id" FROM (SELECT 1 AS id) AS entity'


def test_an_entity_is_a_dataset_or_a_query_in_the_database():
    owner = mapping(entities=[])
    with pytest.raises(IntegrityError), transaction.atomic():
        MappingEntity.objects.create(
            mapping=owner, kind="node", name="both", dataset="units", sql="SELECT 1", columns=["id"]
        )
    with pytest.raises(IntegrityError), transaction.atomic():
        MappingEntity.objects.create(
            mapping=owner, kind="node", name="../up", dataset="units", columns=["id"]
        )


def query_mapping(sql: str, *, catalog: str = CATALOG, role: str | None = "analytics"):
    name = f"query-{Mapping.objects.count()}"
    return mapping(
        name,
        role=role,
        entities=[{"kind": "node", "name": "orders", "sql": sql, "catalog": catalog, "columns": ["id"]}],
    )


@pytest.mark.parametrize(
    "sql, problem",
    [
        (
            "SELECT 1 AS id) AS entity), location => 'gs://bucket/exports/tenant-2/snapshot-9/nodes/x', "
            "format => 'PARQUET')) --",
            "not a query Trino's grammar reads",
        ),
        ("SELECT 1 AS id; DROP TABLE orders", "a semicolon"),
        ("SELECT 1 AS id;", "a semicolon"),
        (
            "SELECT 'a'') AS entity), location => ''/elsewhere'', format => ''PARQUET'')) --' AS id) "
            "AS x), location => '/elsewhere', format => 'PARQUET')) --",
            "not a query Trino's grammar",
        ),
        ("SELECT ((1) AS id", "not a query Trino's grammar reads"),
        ("SELECT (1)) AS id", "not a query Trino's grammar reads"),
        ("DELETE FROM orders", "a DELETE statement"),
        ("SHOW TABLES", "a SHOW statement"),
        (
            "SELECT * FROM TABLE(system.unload(input => TABLE(SELECT 1 AS id), location => '/x', "
            "format => 'PARQUET'))",
            "a table function",
        ),
        ("SELECT * FROM TABLE(lake.system.query(query => 'DELETE FROM t'))", "a table function"),
        ("SELECT ? AS id", "a parameter"),
        ("SELECT " + "(" * 200 + "1" + ")" * 200 + " AS id", "nested too deeply"),
    ],
)
def test_an_entity_that_is_not_exactly_one_query_is_refused(settings, sql, problem):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    with pytest.raises(services.InvalidMapping, match=f"node orders: {re.escape(problem)}"):
        services.create_snapshot(query_mapping(sql))
    assert not ExportJob.objects.exists()


@pytest.mark.parametrize(
    "sql, inner",
    [
        (
            "SELECT a AS id FROM t UNION ALL SELECT b FROM u",
            "SELECT a AS id FROM t UNION ALL SELECT b FROM u",
        ),
        ("WITH x AS (SELECT 1 AS id) SELECT id FROM x", "WITH x AS (SELECT 1 AS id) SELECT id FROM x"),
        ("SELECT 'it''s ) ; -- fine' AS note, 1 AS id", "SELECT 'it''s ) ; -- fine' AS note, 1 AS id"),
        ("SELECT 1 AS id -- ) AS entity), location => '/x'", "SELECT 1 AS id"),
        ("SELECT 1 AS id /* ) AS entity), location => '/x' */", "SELECT 1 AS id"),
        ("SELECT id FROM lake.sales.orders", "SELECT id FROM lake.sales.orders"),
    ],
)
def test_a_single_query_is_embedded_as_written_back_from_its_tree(settings, sql, inner):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    job = jobs_of(services.create_snapshot(query_mapping(sql)))[0]
    assert job.sql == f'SELECT "id" FROM ({inner}) AS entity'


def test_a_tenant_without_a_binding_exports_no_trino_query(settings):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    with pytest.raises(services.InvalidMapping, match="the tenant has no Trino binding"):
        services.create_snapshot(query_mapping("SELECT 1 AS id", role=None))
    # Its datasets still export: they run on Conveyor's own PostgreSQL.
    assert services.create_snapshot(mapping("own", role=None)).jobs.count() == 3


def test_an_entitys_catalogs_are_the_bindings(settings):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    with pytest.raises(services.InvalidMapping, match="catalog 'hr' is not one the tenant's"):
        services.create_snapshot(query_mapping("SELECT 1 AS id", catalog="hr"))
    with pytest.raises(services.InvalidMapping, match="a Trino query names its catalog"):
        services.create_snapshot(query_mapping("SELECT 1 AS id", catalog=""))
    with pytest.raises(services.InvalidMapping, match="the query reads catalog 'system'"):
        services.create_snapshot(query_mapping("SELECT query AS id FROM system.runtime.queries"))
    with pytest.raises(services.InvalidMapping, match="the query reads catalog 'hr'"):
        services.create_snapshot(query_mapping('SELECT id FROM lake.s.a JOIN "hr".s.b USING (id)'))
    assert not ExportJob.objects.exists()


def test_the_jobs_role_is_the_bindings_when_the_snapshot_is_taken(settings):
    settings.EXPORTS_TRINO_URL = "http://trino.example:8080"
    owned = query_mapping("SELECT 1 AS id")
    first = jobs_of(services.create_snapshot(owned))[0]
    binding(owned.tenant, role="reporting")
    second = jobs_of(services.create_snapshot(owned))[0]
    assert (first.starburst_role, second.starburst_role) == ("analytics", "reporting")


# -- claims -------------------------------------------------------------------------


def one_node(**options) -> Snapshot:
    """A snapshot of one dataset node: its export is all a claim can take."""
    return services.create_snapshot(
        mapping(
            entities=[{"kind": "node", "name": "entries", "dataset": "data_entries", "columns": ["id"]}],
            **options,
        )
    )


def engine_job(row: ExportJob) -> Job:
    return Job.objects.get(pk=row.job_id)


def fresh(row: ExportJob) -> ExportJob:
    return ExportJob.objects.get(pk=row.pk)


def kinds(row: ExportJob) -> list[str]:
    return list(ExportEvent.objects.filter(job_id=row.pk).order_by("at", "id").values_list("kind", flat=True))


def state(row: ExportJob) -> tuple:
    """What a refused word must leave as it was: the row, its history, and its engine
    job's claim."""
    values = (
        ExportJob.objects.filter(pk=row.pk)
        .values_list(
            "status",
            "generation",
            "claimed_by",
            "query_id",
            "next_uri",
            "poll_count",
            "next_poll_at",
            "row_count",
            "size_bytes",
            "files",
            "error_message",
            "updated_at",
        )
        .get()
    )
    job = engine_job(row)
    events = ExportEvent.objects.filter(job_id=row.pk).count()
    return (*values, events, job.state, job.lease_token, job.attempts, job.result, job.run_after)


def test_claims_take_nodes_before_edges_oldest_snapshot_first_and_never_twice():
    first, second = snapshot(), snapshot(name="other")
    taken = claim_jobs("w1", 4)
    assert [(job.snapshot_id, job.job_type, job.entity_name) for job in taken] == [
        (first.pk, "node", "entries"),
        (first.pk, "node", "factors"),
        (first.pk, "edge", "computed_with"),
        (second.pk, "node", "entries"),
    ]
    for job in taken:
        # The worker's name carries its credential's, in the row as in the engine job.
        assert (job.status, job.generation, job.claimed_by) == (JobStatus.CLAIMED, 1, "exports/w1")
        running = engine_job(job)
        assert (running.state, running.attempts, running.lease_token) == (Job.State.RUNNING, 1, job.lease)
        assert kinds(job) == [EventKind.CREATED, EventKind.CLAIMED]
    claimed = ExportEvent.objects.get(job_id=taken[0].pk, kind=EventKind.CLAIMED)
    assert (claimed.generation, claimed.worker, claimed.message) == (1, "exports/w1", "claim 1, attempt 1")
    rest = claim_jobs("w2", 10)
    assert [(job.snapshot_id, job.entity_name, job.claimed_by) for job in rest] == [
        (second.pk, "factors", "exports/w2"),
        (second.pk, "computed_with", "exports/w2"),
    ]
    assert claim_jobs("w3", 10) == []
    # A snapshot's first claim starts its making.
    assert set(Snapshot.objects.values_list("status", flat=True)) == {SnapshotStatus.CREATING}


def test_a_claim_tells_its_worker_the_whole_export_and_a_poll_its_query(clock):
    snap = one_node()
    claimed = remote.claim(CREDENTIAL, "w1", limit=5, queues=["exports"])
    [job] = claimed.jobs
    row = ExportJob.objects.get(job_id=job.pk)
    spec = JobSpec.from_json(claimed.details[job.pk]["spec"])
    assert (spec.id, spec.snapshot_id, spec.tenant_id, spec.generation, spec.status) == (
        row.pk,
        snap.pk,
        snap.tenant_id,
        1,
        "claimed",
    )
    assert (spec.engine, spec.sql, spec.destination) == ("postgres", row.sql, row.destination)
    assert (spec.column_names, spec.column_types) == (("id",), ("bigint",))
    # Beats every third of the export's 15 s lease.
    assert claimed.heartbeat_seconds == services.LEASE_SECONDS / 3
    remote.snooze(
        CREDENTIAL,
        "w1",
        job.pk,
        claimed.token,
        seconds=60,
        details={"query_id": "q1", "next_uri": "http://t/v1/statement/q1/1"},
    )
    clock.advance(2)  # the type's schedule, not the worker's 60 s
    poll = remote.claim(CREDENTIAL, "w2", limit=5, queues=["exports"])
    spec = JobSpec.from_json(poll.details[job.pk]["spec"])
    assert (spec.status, spec.query_id, spec.next_uri, spec.poll_count, spec.generation) == (
        "submitted",
        "q1",
        "http://t/v1/statement/q1/1",
        0,
        1,
    )
    # A poll is no new claim.
    row.refresh_from_db()
    assert (row.status, row.generation) == (JobStatus.SUBMITTED, 1)
    assert kinds(row) == [EventKind.CREATED, EventKind.CLAIMED, EventKind.SUBMITTED]


def test_a_claim_the_reaper_took_back_is_claimed_anew_and_the_lost_workers_word_changes_nothing(clock):
    one_node()
    lost = claim_jobs("w1", 1)[0]
    clock.advance(services.LEASE_SECONDS + 1)  # no heartbeat for a whole lease
    assert reaper.rescue_expired().rescued == 1
    again = claim_jobs("w2", 1)[0]
    assert again.pk == lost.pk
    assert (again.status, again.generation, again.claimed_by) == (JobStatus.CLAIMED, 2, "exports/w2")
    before = state(again)
    with pytest.raises(remote.NotHeld):
        report(lost, "submitted", query_id="q-late")
    with pytest.raises(remote.NotHeld):
        report(lost, "completed", rows=1, bytes=1, files=["part-g1.parquet"])
    with pytest.raises(remote.NotHeld):
        report(lost, "failed", error="late")
    assert state(again) == before
    claims = ExportEvent.objects.filter(job_id=lost.pk, kind=EventKind.CLAIMED).order_by("id")
    assert [(event.generation, event.worker, event.from_status) for event in claims] == [
        (1, "exports/w1", JobStatus.PENDING),
        (2, "exports/w2", JobStatus.CLAIMED),
    ]
    assert claims.last().message == "claim 2, attempt 2; the claim of exports/w1 was lost"
    assert complete(again).status == JobStatus.COMPLETED


# -- polls --------------------------------------------------------------------------


def test_polls_follow_the_fibonacci_table_kept_in_the_row(clock):
    one_node()
    job = claim_jobs("w1", 1)[0]
    job = report(job, "submitted", query_id="q1", next_uri="http://t/v1/statement/q1/1")
    assert (job.submitted_at, job.poll_count) == (clock.now(), 0)
    waits = []
    for n in range(11):
        wait = (job.next_poll_at - clock.now()).total_seconds()
        waits.append(round(wait))
        # The engine job sleeps until the poll the row says is next.
        assert engine_job(job).run_after == job.next_poll_at
        clock.advance(wait - 1)
        assert polled_jobs("w2", 5) == []  # not before its time
        clock.advance(1)
        due = polled_jobs("w1", 5)
        assert [d.pk for d in due] == [job.pk]
        assert (due[0].status, due[0].generation, due[0].query_id) == (JobStatus.SUBMITTED, 1, "q1")
        assert polled_jobs("w2", 5) == []  # taken for a poll: no one else gets it meanwhile
        job = report(due[0], "submitted", next_uri=f"http://t/v1/statement/q1/{n + 2}")
    assert waits == [2, 3, 5, 8, 13, 21, 34, 55, 89, 90, 90]
    assert (job.poll_count, job.next_uri) == (11, "http://t/v1/statement/q1/12")
    # Polls are snoozes: they spend none of the export's attempts and make no claim.
    sleeping = engine_job(job)
    assert (sleeping.state, sleeping.attempts) == (Job.State.PENDING, 0)
    assert kinds(job) == [EventKind.CREATED, EventKind.CLAIMED, EventKind.SUBMITTED]


@given(st.integers(min_value=0, max_value=10_000))
def test_a_poll_delay_is_the_tables_next_entry_capped_at_90(polls):
    table = [2, 3, 5, 8, 13, 21, 34, 55, 89, 90]
    assert services.poll_delay(polls) == timedelta(seconds=table[min(polls, 9)])


def test_a_poll_whose_worker_died_is_polled_again_and_the_dead_polls_word_changes_nothing(clock):
    one_node()
    job = claim_jobs("w1", 1)[0]
    report(job, "submitted", query_id="q1")
    clock.advance(2)
    first = polled_jobs("w1", 1)[0]
    clock.advance(services.LEASE_SECONDS + 1)
    assert reaper.rescue_expired().rescued == 1
    second = polled_jobs("w2", 1)[0]
    # Still the same submission: polled again, not exported anew.
    assert (second.pk, second.status, second.generation, second.query_id) == (
        job.pk,
        JobStatus.SUBMITTED,
        1,
        "q1",
    )
    report(second, "submitted", next_uri="http://t/v1/statement/q1/2")
    before = state(second)
    with pytest.raises(remote.NotHeld):
        report(first, "submitted", next_uri="http://t/v1/statement/q1/late")
    with pytest.raises(remote.NotHeld):
        report(first, "failed", error="late word from the dead poll")
    assert state(second) == before
    assert (fresh(job).poll_count, fresh(job).next_uri) == (1, "http://t/v1/statement/q1/2")


@pytest.mark.parametrize(
    "details, problem",
    [
        ({}, "details: query_id must be text of 1 to 200 characters"),
        ({"query_id": ""}, "details: query_id must be text of 1 to 200 characters"),
        ({"query_id": 7}, "details: query_id must be text of 1 to 200 characters"),
        ({"query_id": "q" * 201}, "details: query_id must be text of 1 to 200 characters"),
        ({"query_id": "q1", "next_uri": "h" * 2001}, "details: next_uri must be text of at most 2000"),
    ],
)
def test_a_submission_must_name_its_query_or_nothing_is_written(details, problem):
    snapshot()
    job = claim_jobs("w1", 1)[0]
    before = state(job)
    with pytest.raises(InvalidArgument, match=re.escape(problem)) as raised:
        remote.snooze(CREDENTIAL, "w1", job.job_id, job.lease, seconds=2, details=details)
    assert raised.value.argument == "details"
    assert state(job) == before  # still claimed, its engine job still running


# -- completions --------------------------------------------------------------------


@pytest.mark.parametrize(
    "hostile",
    [
        "../../../tenant-2/snapshot-1/nodes/x/part-g1.parquet",
        "../entries-evil/part-g1.parquet",
        "g1/../../factors/part-g1.parquet",
        "..",
        "./part-g1.parquet",
        "g1/./part-g1.parquet",
        ".",
        "",
        "/etc/passwd",
        "{destination}/part-g1.parquet",  # inside, but a worker says files relative
        "s3://other-bucket/tenant-1/part-g1.parquet",
        "file:///etc/passwd",
        "file://{destination}/part-g1.parquet",
        "x" * (services.MAX_FILE_PATH + 1),
        None,
        7,
    ],
)
def test_a_completion_listing_a_file_outside_its_folder_is_refused_and_nothing_written(
    settings, tmp_path, hostile
):
    settings.EXPORTS_STORAGE_URL = str(tmp_path)
    snapshot()
    job = claim_jobs("w1", 1)[0]
    before = state(job)
    named = hostile.format(destination=job.destination) if isinstance(hostile, str) else hostile
    with pytest.raises(InvalidArgument, match="^result: ") as raised:
        remote.complete(
            CREDENTIAL,
            "w1",
            job.job_id,
            job.lease,
            result={"rows": 1, "bytes": 1, "files": ["part-g1.parquet", named]},
        )
    assert raised.value.argument == "result"
    # Still claimed, its engine job still running under the claim's lease, no result.
    assert state(job) == before
    assert engine_job(job).state == Job.State.RUNNING
    assert complete(job).status == JobStatus.COMPLETED  # the holder still can


def test_a_completion_lists_at_most_so_many_paths_of_at_most_so_many_characters(settings, tmp_path):
    settings.EXPORTS_STORAGE_URL = str(tmp_path)
    snapshot()
    job = claim_jobs("w1", 1)[0]
    before = state(job)
    too_many = [f"g1/{n}.parquet" for n in range(services.MAX_RESULT_FILES + 1)]
    for files in (too_many, "part-g1.parquet", None):
        with pytest.raises(InvalidArgument, match="result: files must be a list of at most 5000 paths"):
            remote.complete(
                CREDENTIAL, "w1", job.job_id, job.lease, result={"rows": 1, "bytes": 1, "files": files}
            )
    assert state(job) == before
    longest = "g1/" + "x" * (services.MAX_FILE_PATH - len("g1/.parquet")) + ".parquet"
    assert len(longest) == services.MAX_FILE_PATH
    done = report(job, "completed", rows=1, bytes=1, files=[longest])
    assert done.files == [f"{job.destination}/{longest}"]


@pytest.mark.parametrize(
    "result, problem",
    [
        (None, "result: an export's success reports rows, bytes and files"),
        ({"bytes": 1, "files": []}, "result: rows must be a count"),
        ({"rows": -1, "bytes": 1, "files": []}, "result: rows must be a count"),
        ({"rows": True, "bytes": 1, "files": []}, "result: rows must be a count"),
        ({"rows": 1.5, "bytes": 1, "files": []}, "result: rows must be a count"),
        ({"rows": 1, "bytes": "1", "files": []}, "result: bytes must be a count"),
    ],
)
def test_a_completion_that_does_not_count_what_it_wrote_is_refused(result, problem):
    snapshot()
    job = claim_jobs("w1", 1)[0]
    before = state(job)
    with pytest.raises(InvalidArgument, match=re.escape(problem)):
        remote.complete(CREDENTIAL, "w1", job.job_id, job.lease, result=result)
    assert state(job) == before


def test_files_inside_the_folder_are_kept_and_shown_inside_the_snapshot(settings):
    settings.EXPORTS_STORAGE_URL = "s3://exports/conveyor"
    snap = snapshot()
    job = claim_jobs("w1", 1)[0]
    assert job.destination == (
        f"s3://exports/conveyor/tenant-{snap.tenant_id}/snapshot-{snap.pk}/nodes/entries"
    )
    done = report(job, "completed", rows=1, bytes=1, files=["part-g1.parquet", "g1/20261127_x-0.parquet"])
    # Kept as full locations; the engine job keeps the worker's words.
    assert done.files == [f"{job.destination}/part-g1.parquet", f"{job.destination}/g1/20261127_x-0.parquet"]
    assert engine_job(done).result == {
        "rows": 1,
        "bytes": 1,
        "files": ["part-g1.parquet", "g1/20261127_x-0.parquet"],
    }
    assert services.shown_files(done) == [
        "nodes/entries/part-g1.parquet",
        "nodes/entries/g1/20261127_x-0.parquet",
    ]


def test_a_location_inside_a_folder_is_read_as_a_path_or_url():
    assert relative_inside("/srv/x/tenant-1/a/b.parquet", "/srv/x/tenant-1") == "a/b.parquet"
    assert relative_inside("/srv/x/tenant-1//a/b.parquet", "/srv/x/tenant-1/") == "a/b.parquet"
    assert relative_inside("file:///srv/x/t/b.parquet", "file:///srv/x/t") == "b.parquet"
    assert relative_inside("S3://bucket/t/b.parquet", "s3://bucket/t") == "b.parquet"
    for outside in (
        "/srv/x/tenant-10/b.parquet",
        "s3://bucket/t/../u/b.parquet",
        "s3://other/t/b.parquet",
        "gs://bucket/t/b.parquet",
        "/srv/x/t/b.parquet?x=1",
        "s3://bucket/t/b.parquet#x",
        "/srv/x/tenant-1",
        "/srv/x/tenant-1/\x00.parquet",
    ):
        folder = "s3://bucket/t" if outside.startswith(("s3", "gs")) else "/srv/x/tenant-1"
        assert relative_inside(outside, folder) is None, outside


def test_an_unload_exported_directly_instead_says_so_in_its_history(clock):
    snap = one_node()
    job = claim_jobs("w1", 1)[0]
    report(job, "submitted", query_id="q1")
    clock.advance(2)
    polled = polled_jobs("w2", 1)[0]
    written = write_part(polled.destination, "part-g1.parquet", rows=4)
    note = "system.unload is not available on the engine (FUNCTION_NOT_FOUND): exported directly instead"
    done = report(polled, "completed", rows=4, bytes=written.size, files=written.files, note=note)
    assert (done.status, done.row_count, done.files) == (JobStatus.COMPLETED, 4, written.files)
    assert kinds(done)[-2:] == [EventKind.FELL_BACK, EventKind.COMPLETED]
    fell_back = ExportEvent.objects.get(job_id=done.pk, kind=EventKind.FELL_BACK)
    assert (fell_back.message, fell_back.worker) == (note, "exports/w2")
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY and snap.node_counts == {"entries": 4}


# -- snapshots finishing ------------------------------------------------------------


def test_the_last_job_finishes_its_snapshot_ready_with_counts():
    snap = snapshot()
    taken = claim_jobs("w1", 3)
    for rows, job in zip((5, 7, 9), taken, strict=True):
        snap.refresh_from_db()
        assert snap.status == SnapshotStatus.CREATING
        complete(job, rows=rows, size=1000)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY and snap.finished_at is not None
    assert snap.node_counts == {"entries": 5, "factors": 7}
    assert snap.edge_counts == {"computed_with": 9}
    assert snap.size_bytes == 3000
    assert {engine_job(job).state for job in taken} == {Job.State.SUCCEEDED}


def test_a_failed_job_fails_its_snapshot_with_the_first_error_once_all_are_done():
    snap = snapshot()
    first, second, third = claim_jobs("w1", 3)
    report(third, "failed", error="out of memory")
    failed = report(second, "failed", error="disk full")
    # The worker said it was for good: no attempt follows.
    assert (failed.status, failed.error_message) == (JobStatus.FAILED, "disk full")
    assert (engine_job(second).state, engine_job(second).attempts) == (Job.State.FAILED, 1)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING  # one job still runs
    complete(first)
    snap.refresh_from_db()
    # The first by position, not by time.
    assert snap.status == SnapshotStatus.FAILED
    assert snap.error == "node factors: disk full"


def test_a_failure_with_attempts_left_hands_the_export_back_and_the_last_one_fails_it(clock):
    snap = one_node()
    job = claim_jobs("w1", 1)[0]
    for attempt in (1, 2):
        back = report(job, "failed", error="connection reset", permanent=False)
        assert (back.status, back.claimed_by, back.claimed_at, back.error_message) == (
            JobStatus.PENDING,
            "",
            None,
            "",
        )
        handed = ExportEvent.objects.filter(job_id=job.pk, kind=EventKind.HANDED_BACK).latest("id")
        assert handed.message == f"attempt {attempt} of 3 failed, to be tried again: connection reset"
        assert handed.worker == f"exports/w{attempt}"
        assert Snapshot.objects.get(pk=snap.pk).status == SnapshotStatus.CREATING
        with pytest.raises(remote.NotHeld):  # that attempt's lease is spent
            report(job, "completed", rows=1, bytes=1, files=["part-g1.parquet"])
        waiting = engine_job(job)
        assert waiting.state == Job.State.PENDING and waiting.run_after > clock.now()
        assert claim_jobs("w9", 1) == []  # not before the engine's backoff
        clock.advance((waiting.run_after - clock.now()).total_seconds())
        job = claim_jobs(f"w{attempt + 1}", 1)[0]
        assert (job.status, job.generation) == (JobStatus.CLAIMED, attempt + 1)
    last = report(job, "failed", error="connection reset", permanent=False)
    assert (last.status, last.error_message) == (JobStatus.FAILED, "connection reset")
    assert engine_job(job).state == Job.State.FAILED
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED and snap.error == "node entries: connection reset"


# -- operators ----------------------------------------------------------------------


def by(user, row: ExportJob) -> list[tuple[str, str]]:
    return list(
        ExportEvent.objects.filter(job_id=row.pk, actor=user).order_by("id").values_list("kind", "via")
    )


def test_operator_actions_through_the_services_move_the_rows_and_say_who(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    snap = snapshot()
    first, second, third = claim_jobs("w1", 3)
    first = report(first, "failed", error="boom")
    with pytest.raises(services.ActionRefused, match="only a failed job"):
        services.retry_job(second, alice)
    with pytest.raises(services.ActionRefused, match="only a claimed job"):
        services.reset_claim(first, alice)
    retried = services.retry_job(first, alice, via="admin")
    assert (retried.status, retried.error_message) == (JobStatus.PENDING, "")
    assert (engine_job(first).state, engine_job(first).attempts) == (Job.State.PENDING, 0)
    reset = services.reset_claim(second, alice, via="admin")
    assert (reset.status, reset.claimed_by) == (JobStatus.PENDING, "")
    assert engine_job(second).state == Job.State.PENDING
    with pytest.raises(remote.NotHeld):  # its worker, if alive, is fenced out
        report(second, "completed", rows=1, bytes=1, files=["part-g1.parquet"])
    third = report(third, "submitted", query_id="q3")

    cancelled = services.cancel_snapshot(snap, alice, via="api")

    assert [row.pk for row in cancelled] == [first.pk, second.pk, third.pk]
    assert {(row.status, row.error_message) for row in cancelled} == {
        (JobStatus.FAILED, "Cancelled by alice")
    }
    assert {engine_job(row).state for row in cancelled} == {Job.State.CANCELLED}
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED and snap.error == "node entries: Cancelled by alice"
    # The query the submitted export left running is cancelled on its engine, by a job.
    assert list(Job.objects.filter(type="exports.CancelQuery").values_list("payload", flat=True)) == [
        {"job": third.pk}
    ]
    assert by(alice, first) == [(EventKind.RETRIED, "admin"), (EventKind.CANCELLED, "api")]
    assert by(alice, second) == [(EventKind.CLAIM_RESET, "admin"), (EventKind.CANCELLED, "api")]
    assert by(alice, third) == [(EventKind.CANCELLED, "api")]
    # The engine job's history says who, alike.
    assert list(
        JobEvent.objects.filter(job_id=first.job_id, actor=alice).order_by("id").values_list("kind", "via")
    ) == [("retried", "admin"), ("cancelled", "api")]
    # Nothing left to cancel.
    assert services.cancel_snapshot(snap, alice) == []


def test_operator_actions_on_the_engine_job_reach_the_export(clock):
    olga = staff("olga", operator=True)
    snap = one_node()
    job = claim_jobs("w1", 1)[0]

    engine.cancel(engine_job(job), actor=olga, via="console")
    row = fresh(job)
    assert (row.status, row.error_message) == (JobStatus.FAILED, "Cancelled by olga")
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED
    with pytest.raises(remote.NotHeld):
        report(job, "completed", rows=1, bytes=1, files=["part-g1.parquet"])

    engine.retry(engine_job(job), actor=olga, via="console")
    row = fresh(job)
    assert (row.status, row.error_message, row.completed_at) == (JobStatus.PENDING, "", None)
    snap.refresh_from_db()
    assert (snap.status, snap.error, snap.finished_at) == (SnapshotStatus.CREATING, "", None)  # reopened
    retried = ExportEvent.objects.get(job_id=row.pk, kind=EventKind.RETRIED)
    assert (retried.actor, retried.via, retried.message) == (olga, "console", "was: Cancelled by olga")

    again = claim_jobs("w2", 1)[0]
    assert (again.pk, again.generation) == (row.pk, 2)
    engine.recover(engine_job(again), actor=olga, via="console", reason="node drained")
    row = fresh(again)
    assert (row.status, row.claimed_by) == (JobStatus.PENDING, "")
    reset = ExportEvent.objects.get(job_id=row.pk, kind=EventKind.CLAIM_RESET)
    assert (reset.actor, reset.via, reset.message) == (olga, "console", "taken from exports/w2")
    assert [taken.pk for taken in claim_jobs("w3", 1)] == [row.pk]  # runs again at once


def test_recovering_a_sleeping_submission_polls_it_now(clock):
    one_node()
    job = report(claim_jobs("w1", 1)[0], "submitted", query_id="q1")
    clock.advance(1)
    assert polled_jobs("w2", 1) == []
    engine.recover(engine_job(job), via="command")
    assert (fresh(job).status, fresh(job).query_id) == (JobStatus.SUBMITTED, "q1")
    [polled] = polled_jobs("w2", 1)
    assert (polled.pk, polled.status, polled.generation) == (job.pk, JobStatus.SUBMITTED, 1)


def test_a_second_retry_of_the_same_failed_export_is_refused_and_a_completed_one_never_runs_again(clock):
    alice, bob = staff("alice", operator=True), staff("bob", operator=True)
    snap = one_node()
    failed = report(claim_jobs("w1", 1)[0], "failed", error="boom")
    # Both operators' pages show it failed.
    alices, bobs = fresh(failed), fresh(failed)
    services.retry_job(alices, alice)
    with pytest.raises(services.ActionRefused, match="retry needs a job that is failed or cancelled"):
        services.retry_job(bobs, bob)
    assert kinds(failed).count(EventKind.RETRIED) == 1

    done = complete(claim_jobs("w2", 1)[0])
    assert done.status == JobStatus.COMPLETED
    with pytest.raises(services.ActionRefused):  # a page that still shows it failed
        services.retry_job(bobs, bob)
    with pytest.raises(services.ActionRefused, match="only a failed job"):
        services.retry_job(done, bob)
    with pytest.raises(IllegalTransition, match="take a new snapshot"):
        engine.replay(engine_job(done), actor=bob, via="console")
    assert engine_job(done).state == Job.State.SUCCEEDED
    assert not JobEvent.objects.filter(job_id=done.job_id, kind="replayed").exists()
    assert fresh(done).status == JobStatus.COMPLETED
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY
    assert kinds(done).count(EventKind.RETRIED) == 1


def test_a_service_action_on_an_export_without_an_engine_job_is_refused():
    snapshot()
    job = claim_jobs("w1", 1)[0]
    ExportJob.objects.filter(pk=job.pk).update(job=None)
    with pytest.raises(services.ActionRefused, match="has no engine job"):
        services.reset_claim(fresh(job), None)
    assert fresh(job).status == JobStatus.CLAIMED


def test_an_export_that_ended_behind_its_engine_jobs_back_is_failed_for_good_not_handed_out(clock):
    snap = one_node()
    [row] = jobs_of(snap)
    # As if settled where its engine job could not follow (a hand in the database).
    ExportJob.objects.filter(pk=row.pk).update(
        status=JobStatus.FAILED, error_message="settled elsewhere", completed_at=clock.now()
    )
    assert claim_jobs("w1", 1) == []
    job = engine_job(row)
    assert (job.state, job.error_kind) == (Job.State.FAILED, Job.ErrorKind.PERMANENT)
    assert job.last_error == f"cannot be run: export {row.pk} is failed already"
    assert claim_jobs("w2", 1) == []  # not again either
    assert (fresh(row).status, fresh(row).error_message) == (JobStatus.FAILED, "settled elsewhere")


def test_an_export_whose_snapshot_was_deleted_is_failed_for_good(clock):
    snap = one_node()
    [row] = jobs_of(snap)
    snap.delete()
    assert claim_jobs("w1", 1) == []
    job = Job.objects.get(pk=row.job_id)
    assert job.state == Job.State.FAILED
    assert job.last_error == f"cannot be run: no export is linked to job {job.pk} (its snapshot was deleted)"


def test_a_poll_attempt_that_fails_cancels_the_submitted_query_whatever_follows(clock):
    one_node()
    (row,) = claim_jobs("w1", 1)
    report(row, "submitted", query_id="q-running", next_uri="http://t/v1/statement/q-running/1")
    clock.advance(2)
    (poll,) = polled_jobs("w2", 1)
    report(poll, "failed", error="the poll's worker lost its storage", permanent=False)

    poll.refresh_from_db()
    assert (poll.status, poll.query_id) == (JobStatus.PENDING, "")
    cancel = Job.objects.get(type="exports.CancelQuery")
    assert cancel.payload == {"job": poll.pk, "query": "q-running"}
