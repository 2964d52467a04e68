"""The export jobs' state machine: snapshots from mappings (their queries checked, their
role and catalogs the tenant's binding), claims, reports fenced by the claim and its
secret, files kept only inside the job's folder, the Fibonacci poll schedule, and
snapshots finishing with their last job."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from hypothesis import given
from hypothesis import strategies as st

from exports import services
from exports.models import EventKind, ExportJob, JobStatus, Mapping, MappingEntity, SnapshotStatus
from exports.spec import relative_inside
from tests.support.exports.builders import (
    CATALOG,
    binding,
    claim_jobs,
    complete,
    jobs_of,
    mapping,
    polled_jobs,
    report,
    snapshot,
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


def test_claims_take_oldest_snapshot_first_and_never_twice():
    first, second = snapshot(), snapshot(name="other")
    taken = claim_jobs("w1", 4)
    assert [job.snapshot_id for job in taken] == [first.pk] * 3 + [second.pk]
    assert all(job.status == JobStatus.CLAIMED and job.generation == 1 for job in taken)
    rest = claim_jobs("w2", 10)
    assert len(rest) == 2 and not {job.pk for job in rest} & {job.pk for job in taken}
    first.refresh_from_db()
    assert first.status == SnapshotStatus.CREATING
    assert claim_jobs("w3", 10) == []


def test_each_claim_has_its_own_secret_and_only_its_hash_is_kept():
    snapshot()
    taken = claim_jobs("w1", 3)
    assert len({job.token for job in taken}) == 3 and all(len(job.token) >= 40 for job in taken)
    for job in taken:
        job.refresh_from_db()
        assert job.claim_token_hash == services.token_hash(job.token) != job.token


def test_a_report_from_a_reset_claim_is_refused_and_recorded(clock):
    snap = snapshot()
    job = claim_jobs("w1", 1)[0]
    clock.advance(601)
    from exports import reconcile

    assert reconcile.reset_stale_claims(clock.now()) == 1
    again = claim_jobs("w2", 1)[0]
    assert again.pk == job.pk and again.generation == 2
    with pytest.raises(services.ClaimLost):
        report(job, "submitted", query_id="q-late")
    job.refresh_from_db()
    assert job.status == JobStatus.CLAIMED and job.claimed_by == "w2" and job.query_id == ""
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds == [
        EventKind.CREATED,
        EventKind.CLAIMED,
        EventKind.CLAIM_RESET,
        EventKind.CLAIMED,
        EventKind.LATE_REFUSED,
    ]
    assert snap.jobs.count() == 3


def row(job: ExportJob) -> tuple:
    return tuple(
        ExportJob.objects.filter(pk=job.pk)
        .values_list(
            "status",
            "generation",
            "claimed_by",
            "query_id",
            "row_count",
            "files",
            "claim_token_hash",
            "updated_at",
        )
        .get()
    )


@pytest.mark.parametrize("token", ["", "guessed", None])
def test_a_report_without_the_claims_secret_is_refused_and_changes_nothing(token):
    snapshot()
    job, other = claim_jobs("w1", 2)
    before = row(job)
    offered = other.token if token is None else token  # None: another job's secret
    with pytest.raises(services.ClaimLost):
        report(
            job,
            "completed",
            worker="intruder",
            row_count=1,
            size_bytes=1,
            claim_token=offered,
            files=(f"{job.destination}/part-g1.parquet",),
        )
    with pytest.raises(services.ClaimLost):
        report(job, "submitted", worker="intruder", query_id="q-evil", claim_token=offered)
    assert row(job) == before
    refused = job.events.filter(kind=EventKind.LATE_REFUSED).values_list("message", flat=True)
    assert len(refused) == 2 and all("does not carry the secret" in text for text in refused)
    assert complete(job).status == JobStatus.COMPLETED  # the holder still can


def test_polls_follow_the_fibonacci_table_kept_in_the_row(clock):
    snapshot()
    job = claim_jobs("w1", 1)[0]
    job = report(job, "submitted", query_id="q1", next_uri="http://t/v1/statement/q1/1")
    waits = []
    for _ in range(11):
        waits.append(round((job.next_poll_at - clock.now()).total_seconds()))
        clock.advance(waits[-1])
        due = polled_jobs("w1", 50)
        assert [d.pk for d in due] == [job.pk]
        # Taken for a poll: no one else gets it meanwhile.
        assert polled_jobs("w2", 50) == []
        job = report(due[0], "submitted", worker="w1", poll_count=due[0].poll_count)
    assert waits == [2, 3, 5, 8, 13, 21, 34, 55, 89, 90, 90]
    assert job.poll_count == 11


@given(st.integers(min_value=0, max_value=10_000))
def test_a_poll_delay_is_the_tables_next_entry_capped_at_90(polls):
    table = [2, 3, 5, 8, 13, 21, 34, 55, 89, 90]
    assert services.poll_delay(polls) == timedelta(seconds=table[min(polls, 9)])


def test_a_poll_result_from_a_poll_someone_else_made_since_is_refused(clock):
    snapshot()
    job = claim_jobs("w1", 1)[0]
    report(job, "submitted", query_id="q1")
    clock.advance(2)
    first = polled_jobs("w1", 1)[0]
    clock.advance(61)  # its poll lease ran out: another worker takes the poll
    second = polled_jobs("w2", 1)[0]
    report(second, "submitted", worker="w2", poll_count=0)
    with pytest.raises(services.ClaimLost):
        report(first, "submitted", worker="w1", poll_count=0)
    assert ExportJob.objects.get(pk=job.pk).poll_count == 1


def test_a_poll_takes_a_new_secret_and_the_submitters_is_refused(clock):
    snapshot()
    job = claim_jobs("w1", 1)[0]
    report(job, "submitted", query_id="q1")
    clock.advance(2)
    polled = polled_jobs("w2", 1)[0]
    assert polled.token != job.token
    with pytest.raises(services.ClaimLost):
        report(job, "failed", worker="w1", error_message="late word from the submitter")
    assert report(polled, "submitted", worker="w2", poll_count=0).poll_count == 1


@pytest.mark.parametrize(
    "where",
    [
        "{destination}/../../../tenant-2/snapshot-1/nodes/x/part-g1.parquet",
        "{destination}/./part-g1.parquet",
        "{root}/tenant-2/snapshot-1/nodes/entries/part-g1.parquet",
        "{destination}-evil/part-g1.parquet",
        "{destination}",
        "/etc/passwd",
        "s3://another-bucket/tenant-1/part-g1.parquet",
        "file://{destination}/part-g1.parquet",
    ],
)
def test_a_completion_listing_a_file_outside_its_folder_is_refused_and_nothing_written(
    settings, tmp_path, where
):
    settings.EXPORTS_STORAGE_URL = str(tmp_path)
    snapshot()
    job = claim_jobs("w1", 1)[0]
    before = row(job)
    outside = where.format(destination=job.destination, root=tmp_path)
    with pytest.raises(services.InvalidReport, match="is not inside the job's folder") as raised:
        report(
            job, "completed", row_count=1, size_bytes=1, files=(f"{job.destination}/part-g1.parquet", outside)
        )
    assert raised.value.field == "files"
    assert row(job) == before and not job.events.filter(kind=EventKind.COMPLETED).exists()


def test_files_inside_the_folder_are_kept_and_shown_inside_the_snapshot(settings):
    settings.EXPORTS_STORAGE_URL = "s3://exports/conveyor"
    snap = snapshot()
    job = claim_jobs("w1", 1)[0]
    assert job.destination == (
        f"s3://exports/conveyor/tenant-{snap.tenant_id}/snapshot-{snap.pk}/nodes/entries"
    )
    files = (f"{job.destination}/part-g1.parquet", f"{job.destination}/g1/20261127_x-0.parquet")
    done = report(job, "completed", row_count=1, size_bytes=1, files=files)
    assert done.files == list(files)
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


def test_the_last_job_finishes_its_snapshot_ready_with_counts():
    snap = snapshot()
    taken = claim_jobs("w1", 3)
    for rows, job in zip((5, 7, 9), taken, strict=True):
        complete(job, rows=rows, size=1000)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.READY and snap.finished_at is not None
    assert snap.node_counts == {"entries": 5, "factors": 7}
    assert snap.edge_counts == {"computed_with": 9}
    assert snap.size_bytes == 3000


def test_a_failed_job_fails_its_snapshot_with_the_first_error_once_all_are_done():
    snap = snapshot()
    first, second, third = claim_jobs("w1", 3)
    report(second, "failed", error_message="disk full")
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING  # two jobs still run
    complete(first)
    complete(third)
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED
    assert snap.error == "node factors: disk full"


def test_a_report_that_is_no_transition_is_refused():
    snapshot()
    job = claim_jobs("w1", 1)[0]
    with pytest.raises(services.InvalidReport):
        report(job, "completed")
    with pytest.raises(services.InvalidReport):
        report(job, "ready")
    with pytest.raises(services.InvalidReport):
        report(job, "submitted")


def test_a_handed_back_job_is_pending_again_and_its_old_claim_refused():
    snapshot()
    job = claim_jobs("w1", 1)[0]
    report(job, "pending")
    handed_back = ExportJob.objects.get(pk=job.pk)
    assert handed_back.status == JobStatus.PENDING and handed_back.claimed_by == ""
    assert handed_back.claim_token_hash == ""
    with pytest.raises(services.ClaimLost):
        report(job, "completed", worker="w1", row_count=1, size_bytes=1)


def test_a_fallback_from_a_submitted_job_is_a_new_claim(clock):
    snapshot()
    job = claim_jobs("w1", 1)[0]
    report(job, "submitted", query_id="q1")
    clock.advance(2)
    polled = polled_jobs("w2", 1)[0]
    taken = report(polled, "claimed", worker="w2", poll_count=0, note="system.unload is missing")
    assert taken.status == JobStatus.CLAIMED and taken.generation == 2 and taken.query_id == ""
    # The poller holds the new claim with the secret it polled with.
    assert report(taken, "claimed", worker="w2").status == JobStatus.CLAIMED
    # Another poller of the same submission comes too late.
    with pytest.raises(services.ClaimLost):
        report(polled, "claimed", worker="w3", poll_count=0)
    kinds = list(taken.events.values_list("kind", flat=True))
    assert EventKind.FELL_BACK in kinds


def test_operator_actions_are_recorded_with_who(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    snap = snapshot()
    first, second, _ = claim_jobs("w1", 3)
    report(first, "failed", error_message="boom")
    with pytest.raises(services.ActionRefused, match="only a failed job"):
        services.retry_job(second, alice)
    retried = services.retry_job(first, alice)
    assert retried.status == JobStatus.PENDING and retried.error_message == ""
    reset = services.reset_claim(second, alice)
    assert reset.status == JobStatus.PENDING
    cancelled = services.cancel_snapshot(snap, alice)
    assert len(cancelled) == 3
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED and snap.error.endswith("Cancelled by alice")
    by_alice = set(first.events.filter(actor=alice).values_list("kind", flat=True))
    assert by_alice == {EventKind.RETRIED, EventKind.CANCELLED}
