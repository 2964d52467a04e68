"""The exports' admin: mappings with their entities (queries checked as they are saved)
and "Take a snapshot", the snapshot page with its jobs, files and history, the
operators' actions recorded with who did them, the tenants' Trino bindings and the
export settings (the platform's), each scoped to the staff user's tenant."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from exports import services
from exports.models import (
    EventKind,
    ExportConfig,
    ExportEvent,
    ExportJob,
    JobStatus,
    Mapping,
    MappingEntity,
    Snapshot,
    SnapshotStatus,
    TrinoBinding,
)
from jobs import remote
from jobs.models import Job, JobEvent
from tests.support.base import page, staff
from tests.support.exports.builders import CATALOG, binding, claim_jobs, complete, jobs_of, mapping, report
from tests.support.history import history_rows

pytestmark = pytest.mark.django_db

MAPPINGS = "/admin/exports/mapping/"
SNAPSHOTS = "/admin/exports/snapshot/"
CONFIG = "/admin/exports/exportconfig/"
BINDINGS = "/admin/exports/trinobinding/"


def browser(user: User, *codenames: str) -> Client:
    """A logged-in browser for ``user``, granted the exports permissions ``codenames``
    (all of them when none is named)."""
    granted = Permission.objects.filter(content_type__app_label="exports")
    user.user_permissions.set(granted.filter(codename__in=codenames) if codenames else granted)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice_user(acme) -> User:
    return staff("alice", of=acme)


@pytest.fixture
def alice(alice_user) -> Client:
    """Acme staff with every exports permission."""
    return browser(alice_user)


def fail(job: ExportJob, message: str = "Trino said no") -> ExportJob:
    return report(job, JobStatus.FAILED, error_message=message)


def submit(job: ExportJob, query_id: str = "20261102_q1") -> ExportJob:
    return report(job, JobStatus.SUBMITTED, query_id=query_id)


def snapshot_url(snap: Snapshot) -> str:
    return f"{SNAPSHOTS}{snap.pk}/change/"


def job_url(job: ExportJob, operation: str) -> str:
    return f"{SNAPSHOTS}{job.snapshot_id}/jobs/{job.pk}/{operation}/"


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def entity_form(**fields: str) -> dict[str, str]:
    """The add form's POST data: a mapping and one entity in its inline."""
    data = {
        "name": "co2",
        "description": "",
        "entities-TOTAL_FORMS": "1",
        "entities-INITIAL_FORMS": "0",
        "entities-MIN_NUM_FORMS": "0",
        "entities-MAX_NUM_FORMS": "1000",
        "entities-0-kind": "node",
        "entities-0-name": "units",
        "entities-0-position": "0",
        "entities-0-dataset": "units",
        "entities-0-sql": "",
        "entities-0-catalog": "",
        "entities-0-columns": "id, code , name",
    }
    data.update({f"entities-0-{name}": value for name, value in fields.items()})
    return data


# --- pages ------------------------------------------------------------------------------------


def test_every_exports_page_answers_with_rows_in_it(admin_client, acme, clock):
    owner = mapping(of=acme)
    snap = services.create_snapshot(owner)
    claimed = claim_jobs("w1", 10)
    for url in [
        MAPPINGS,
        f"{MAPPINGS}add/",
        f"{MAPPINGS}{owner.pk}/change/",
        f"{MAPPINGS}{owner.pk}/take-snapshot/",
        SNAPSHOTS,
        snapshot_url(snap),
        f"{SNAPSHOTS}?status__exact=creating",
        f"{SNAPSHOTS}?mapping__id__exact={owner.pk}",
        f"{SNAPSHOTS}?tenant__id__exact={acme.pk}",
        f"{SNAPSHOTS}{snap.pk}/cancel/",
        job_url(claimed[0], "reset-claim"),
        CONFIG,
        f"{CONFIG}1/change/",
        BINDINGS,
        f"{BINDINGS}add/",
        f"{BINDINGS}{TrinoBinding.objects.get(tenant=acme).pk}/change/",
    ]:
        page(admin_client, url)


# --- mappings ---------------------------------------------------------------------------------


def test_tenant_staff_add_a_mapping_whose_columns_become_a_list(alice, acme):
    response = alice.post(f"{MAPPINGS}add/", entity_form())

    assert response.status_code == 302, response.context["adminform"].errors
    made = Mapping.objects.get()
    assert (made.tenant, made.name) == (acme, "co2")
    entity = made.entities.get()
    assert (entity.kind, entity.name, entity.dataset, entity.sql) == ("node", "units", "units", "")
    assert entity.columns == ["id", "code", "name"]


def test_the_entity_shows_its_columns_comma_separated_and_the_datasets_columns(alice, acme):
    owner = mapping(of=acme)

    html = page(alice, f"{MAPPINGS}{owner.pk}/change/")

    assert 'value="id, quantity, classification, created_at"' in html
    assert "units: id, code, name, parent_id, created_at" in html  # the dataset help
    assert "data_entries: id, data_entry_type, year" in html
    assert f'href="{MAPPINGS}{owner.pk}/take-snapshot/"' in html


@pytest.mark.parametrize(
    ("fields", "field", "error"),
    [
        ({"columns": "id, salary"}, "columns", "dataset units has no column &#x27;salary&#x27;"),
        ({"columns": "id, , code"}, "columns", "an empty column name"),
        ({"columns": "id, code, id"}, "columns", "listed twice: id"),
        ({"sql": "SELECT 1 AS id"}, "sql", "a dataset entity has no SQL"),
        ({"dataset": ""}, "dataset", "choose a dataset, or write the SQL of a Trino query"),
        ({"dataset": "payroll"}, "dataset", "Select a valid choice"),
        ({"name": "../up"}, "name", "letters, digits, _ . and - only"),
    ],
)
def test_a_mistake_in_an_entity_is_reported_on_its_field(alice, fields, field, error):
    response = alice.post(f"{MAPPINGS}add/", entity_form(**fields))

    assert response.status_code == 200
    inline = response.context["inline_admin_formsets"][0].formset.forms[0]
    assert list(inline.errors) == [field]
    assert error in response.content.decode()
    assert not Mapping.objects.exists() and not MappingEntity.objects.exists()


def test_a_query_entity_keeps_its_sql_and_catalog(alice, acme):
    binding(acme, catalogs=("hive", CATALOG))
    response = alice.post(
        f"{MAPPINGS}add/", entity_form(dataset="", sql="SELECT id FROM orders", catalog="hive", columns="id")
    )

    assert response.status_code == 302
    entity = MappingEntity.objects.get()
    assert (entity.dataset, entity.sql, entity.catalog, entity.columns) == (
        "",
        "SELECT id FROM orders",
        "hive",
        ["id"],
    )


@pytest.mark.parametrize(
    ("sql", "catalog", "field", "error"),
    [
        (
            "SELECT 1 AS id) AS entity), location => &#x27;gs://b/tenant-2/x&#x27;, "
            "format => &#x27;PARQUET&#x27;)) --",
            CATALOG,
            "sql",
            "Not a query Trino&#x27;s grammar reads",
        ),
        ("SELECT 1 AS id; DROP TABLE orders", CATALOG, "sql", "A semicolon"),
        ("DELETE FROM orders", CATALOG, "sql", "A DELETE statement"),
        ("SELECT id FROM orders", "hr", "catalog", "Catalog &#x27;hr&#x27; is not one the tenant"),
        ("SELECT id FROM orders", "", "catalog", "A Trino query names its catalog"),
        ("SELECT id FROM hr.pay.salaries", CATALOG, "sql", "The query reads catalog &#x27;hr&#x27;"),
    ],
)
def test_a_query_entity_that_is_not_one_query_in_a_bound_catalog_is_not_saved(
    alice, acme, sql, catalog, field, error
):
    binding(acme)
    response = alice.post(
        f"{MAPPINGS}add/",
        entity_form(dataset="", sql=sql.replace("&#x27;", "'"), catalog=catalog, columns="id"),
    )

    assert response.status_code == 200
    inline = response.context["inline_admin_formsets"][0].formset.forms[0]
    assert list(inline.errors) == [field]
    assert error in response.content.decode()
    assert not Mapping.objects.exists() and not MappingEntity.objects.exists()


def test_a_tenant_without_a_binding_cannot_save_a_query_entity(alice):
    response = alice.post(
        f"{MAPPINGS}add/", entity_form(dataset="", sql="SELECT id FROM orders", catalog=CATALOG, columns="id")
    )

    assert response.status_code == 200
    assert "The tenant has no Trino binding" in response.content.decode()
    assert not MappingEntity.objects.exists()


def test_a_duplicate_mapping_name_within_the_tenant_is_a_form_error(alice, acme, globex):
    mapping("co2", of=globex)  # another tenant's: no clash
    assert alice.post(f"{MAPPINGS}add/", entity_form()).status_code == 302

    response = alice.post(f"{MAPPINGS}add/", entity_form())

    assert "this tenant already has a mapping named &#x27;co2&#x27;" in response.content.decode()
    assert Mapping.objects.filter(tenant=acme).count() == 1


# --- taking a snapshot ------------------------------------------------------------------------


def test_take_a_snapshot_from_the_mapping_page_as_the_staff_user(alice, alice_user, acme):
    owner = mapping(of=acme)
    url = f"{MAPPINGS}{owner.pk}/take-snapshot/"
    asked = page(alice, url)
    assert "Take the snapshot" in asked and "run under the role analytics" in asked
    assert not Snapshot.objects.exists()  # the page only asks

    response = alice.post(url, {"starburst_role": "reporting"})  # not the caller's to choose

    snap = Snapshot.objects.get()
    assert response["Location"] == snapshot_url(snap)
    assert (snap.mapping, snap.created_by) == (owner, alice_user)
    assert {job.starburst_role for job in jobs_of(snap)} == {""}  # datasets: no Trino role
    assert set(ExportEvent.objects.values_list("kind", "actor")) == {(EventKind.CREATED, alice_user.pk)}
    followed = alice.get(response["Location"])
    assert f"Took snapshot {snap.pk} of co2: 3 job(s) queued." in re.sub(
        "<[^>]+>", "", " ".join(messages_of(followed))
    )


def test_a_mapping_the_service_refuses_shows_why_and_takes_nothing(alice, acme):
    empty = mapping("empty", of=acme, entities=[])
    MappingEntity.objects.create(
        mapping=empty, kind="node", name="u", dataset="units", columns=["id", "password"]
    )

    response = alice.post(f"{MAPPINGS}{empty.pk}/take-snapshot/", {}, follow=True)

    assert messages_of(response) == ["No snapshot of empty: Node u: dataset units has no column 'password'."]
    assert not Snapshot.objects.exists()


def test_the_list_action_takes_a_snapshot_of_each_selected_mapping(alice, alice_user, acme):
    first, second = mapping("first", of=acme), mapping("second", of=acme)

    alice.post(MAPPINGS, {"action": "take_snapshots", "_selected_action": [first.pk, second.pk]})

    assert sorted(Snapshot.objects.values_list("mapping__name", "created_by")) == [
        ("first", alice_user.pk),
        ("second", alice_user.pk),
    ]


def test_taking_a_snapshot_needs_the_permission_to_add_one(acme):
    owner = mapping(of=acme)
    viewer = browser(staff("viewer", of=acme), "view_mapping", "view_snapshot")

    assert "take-snapshot" not in page(viewer, f"{MAPPINGS}{owner.pk}/change/")
    assert viewer.post(f"{MAPPINGS}{owner.pk}/take-snapshot/").status_code == 403
    assert not Snapshot.objects.exists()


# --- the snapshot list and page ---------------------------------------------------------------


def test_the_list_shows_jobs_done_rows_size_and_who(alice, alice_user, acme, clock):
    snap = services.create_snapshot(mapping(of=acme), user=alice_user)
    first, second, _ = claim_jobs("w1", 10)
    complete(first, rows=1200, size=3 * 1024 * 1024)
    complete(second, rows=34, size=2048)

    listing = page(alice, SNAPSHOTS)

    assert '<td class="field-jobs_done">2 / 3</td>' in listing
    assert '<td class="field-rows">1,234</td>' in listing
    assert '<td class="field-size">3.0\xa0MB</td>' in listing
    assert '<td class="field-created_by nowrap">alice</td>' in listing
    assert snapshot_url(snap) in listing


def test_the_snapshot_page_shows_each_job_its_poll_files_and_history(alice, acme, clock):
    snap = services.create_snapshot(mapping(of=acme))
    entries, factors, edges = claim_jobs("worker-7", 10)
    entries = submit(entries)
    factors = complete(factors, rows=5, size=1536)
    fail(edges, "<b>Trino</b> said no")
    clock.advance(1)
    wait = int((entries.next_poll_at - clock.now()).total_seconds())

    html = page(alice, snapshot_url(snap))

    row = re.search(rf'<tr class="exports-job" id="job-{entries.pk}".*?</tr>', html, re.S).group()
    # A remote worker's name carries its credential's: the export workers' is "exports".
    assert '<td data-label="Claimed by">exports/worker-7</td>' in row
    assert f'exports-next-poll" data-label="Next poll">in {wait} s</td>' in row
    done = re.search(rf'<tr class="exports-job" id="job-{factors.pk}".*?</tr>', html, re.S).group()
    assert '<td data-label="Rows">5</td>' in done and "1.5\xa0KB" in done
    assert (
        f'href="{SNAPSHOTS}{snap.pk}/jobs/{factors.pk}/files/0/">nodes/factors/part-g1.parquet</a>'
    ) in done
    assert "&lt;b&gt;Trino&lt;/b&gt; said no" in html and "<b>Trino</b>" not in html
    assert f'action="{job_url(edges, "retry")}"' in html  # the failed job's button
    history = re.search(rf'id="job-{entries.pk}-history".*?</details>', html, re.S).group()
    assert "(3 events)" in history
    [created, claimed, submitted] = history_rows(history)
    assert [created["kind"], claimed["kind"], submitted["kind"]] == ["created", "claimed", "submitted"]
    assert (claimed["change"], claimed["generation"], claimed["worker"]) == (
        "pending → claimed",
        "1",
        "exports/worker-7",
    )
    assert "query 20261102_q1" in submitted["message"]


def test_each_job_links_to_its_engine_jobs_page_for_whom_may_view_jobs(acme, clock):
    snap = services.create_snapshot(mapping(of=acme))
    rows = jobs_of(snap)
    vera = staff("vera", of=acme)
    viewer = browser(vera)  # the exports' permissions only

    html = page(viewer, snapshot_url(snap))

    for row in rows:
        cell = re.search(rf'<tr class="exports-job" id="job-{row.pk}".*?</tr>', html, re.S).group()
        assert f'<td class="exports-engine-job" data-label="Engine job">#{row.job_id}</td>' in cell
    assert "/admin/jobs/job/" not in html
    vera.user_permissions.add(Permission.objects.get(content_type__app_label="jobs", codename="view_job"))

    html = page(viewer, snapshot_url(snap))

    for row in rows:
        engine_page = reverse("admin:jobs_job_change", args=[row.job_id])
        cell = re.search(rf'<tr class="exports-job" id="job-{row.pk}".*?</tr>', html, re.S).group()
        assert f'data-label="Engine job"><a href="{engine_page}">#{row.job_id}</a></td>' in cell
        # The engine job's page is the export's, and links back to its snapshot.
        assert f"#job-{row.pk}" in page(viewer, engine_page)


def test_object_store_files_are_shown_as_text_inside_the_snapshot(alice, acme, settings):
    settings.EXPORTS_STORAGE_URL = "s3://exports-bucket/conveyor"
    snap = services.create_snapshot(mapping(of=acme))
    taken = claim_jobs("w1", 1)[0]
    # The worker's word only: no bucket here to write to (the snapshot's other jobs run on).
    job = report(
        taken, "completed", row_count=10, size_bytes=100, files=(f"{taken.destination}/part-g1.parquet",)
    )

    html = page(alice, snapshot_url(snap))

    assert "<code>nodes/entries/part-g1.parquet</code>" in html
    assert "exports-bucket" not in html and f"/jobs/{job.pk}/files/" not in html
    # A platform operator sees where the file is.
    assert f"<code>{job.files[0]}</code>" in page(browser(staff("olga", operator=True)), snapshot_url(snap))


# --- actions ----------------------------------------------------------------------------------


def test_retry_a_failed_job_as_the_staff_user(alice, alice_user, acme):
    snap = services.create_snapshot(mapping(of=acme))
    job = fail(claim_jobs("w1", 1)[0])

    response = alice.post(job_url(job, "retry"), follow=True)

    assert messages_of(response) == [f"Job {job.pk} (node entries) will run again."]
    job.refresh_from_db()
    snap.refresh_from_db()
    assert job.status == JobStatus.PENDING and snap.status == SnapshotStatus.CREATING
    retried = job.events.get(kind=EventKind.RETRIED)
    assert (retried.actor, retried.via, retried.message) == (alice_user, "admin", "was: Trino said no")
    assert LogEntry.objects.get().change_message == f"Retry via the admin (job {job.pk}, entries)"
    # The engine's retry of its job: the next claim runs it again, as claim 2.
    engine_job = Job.objects.get(pk=job.job_id)
    assert (engine_job.state, engine_job.attempts) == (Job.State.PENDING, 0)
    assert engine_job.events.get(kind=JobEvent.Kind.RETRIED).actor == alice_user
    [again] = [row for row in claim_jobs("w2", 10) if row.pk == job.pk]
    assert (again.generation, again.claimed_by) == (2, "exports/w2")


def test_a_refused_action_shows_the_reason(alice, acme):
    services.create_snapshot(mapping(of=acme))
    job = claim_jobs("w1", 1)[0]

    response = alice.post(job_url(job, "retry"), follow=True)

    assert messages_of(response) == [
        f"Job {job.pk} (node entries): not done. Only a failed job is retried; this one is claimed."
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.CLAIMED
    assert not job.events.filter(kind=EventKind.RETRIED).exists()
    assert alice.get(job_url(job, "retry")).status_code == 405  # a change is a POST


def test_reset_a_claim_after_confirming(alice, alice_user, acme):
    services.create_snapshot(mapping(of=acme))
    job = claim_jobs("w1", 1)[0]

    question = page(alice, job_url(job, "reset-claim"))
    job.refresh_from_db()
    assert "Hand Job" in question and job.status == JobStatus.CLAIMED  # asked, not done
    response = alice.post(job_url(job, "reset-claim"), follow=True)

    assert messages_of(response) == [
        f"Job {job.pk} (node entries) is pending again; its worker's reports will be refused."
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.claimed_by == ""
    reset = job.events.get(kind=EventKind.CLAIM_RESET)
    assert (reset.actor, reset.via, reset.message) == (alice_user, "admin", "taken from exports/w1")
    # The engine's recovery of its job, which fences the worker out.
    assert Job.objects.get(pk=job.job_id).state == Job.State.PENDING
    with pytest.raises(remote.NotHeld):
        fail(job, "too late")
    job.refresh_from_db()
    assert (job.status, job.error_message) == (JobStatus.PENDING, "")


def test_cancel_a_snapshot_after_confirming(alice, alice_user, acme):
    snap = services.create_snapshot(mapping(of=acme))
    complete(claim_jobs("w1", 1)[0])

    assert "2 unfinished job(s) fail" in page(alice, f"{SNAPSHOTS}{snap.pk}/cancel/")
    response = alice.post(f"{SNAPSHOTS}{snap.pk}/cancel/", follow=True)

    assert messages_of(response) == [f"Snapshot {snap.pk} cancelled: 2 unfinished job(s) failed."]
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED
    cancelled = ExportEvent.objects.filter(kind=EventKind.CANCELLED)
    assert cancelled.count() == 2 and {(event.actor, event.via) for event in cancelled} == {
        (alice_user, "admin")
    }
    # Their engine jobs are cancelled (a worker holding one loses it at its next beat).
    assert [Job.objects.get(pk=row.job_id).state for row in jobs_of(snap)] == [
        Job.State.SUCCEEDED,
        Job.State.CANCELLED,
        Job.State.CANCELLED,
    ]
    again = alice.post(f"{SNAPSHOTS}{snap.pk}/cancel/", follow=True)
    assert messages_of(again) == [f"Snapshot {snap.pk}: nothing to cancel, it is failed."]


def test_the_bulk_cancel_asks_first_then_cancels(alice, acme):
    snap = services.create_snapshot(mapping(of=acme))
    selected = {"action": "cancel_snapshots", "_selected_action": [snap.pk]}

    asked = alice.post(SNAPSHOTS, selected)
    assert "Cancel 1 unfinished snapshot(s) of the 1 selected?" in asked.content.decode()
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.PENDING
    alice.post(SNAPSHOTS, {**selected, "post": "yes"})

    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.FAILED


def test_actions_need_the_change_permission(acme):
    snap = services.create_snapshot(mapping(of=acme))
    job = fail(claim_jobs("w1", 1)[0])
    viewer = browser(staff("viewer", of=acme), "view_snapshot")

    html = page(viewer, snapshot_url(snap))

    assert "/retry/" not in html and "/cancel/" not in html
    assert viewer.post(job_url(job, "retry")).status_code == 403
    assert viewer.post(f"{SNAPSHOTS}{snap.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED


# --- files ------------------------------------------------------------------------------------


@pytest.fixture
def local_storage(settings, tmp_path):
    settings.EXPORTS_STORAGE_URL = str(tmp_path / "exports")
    return tmp_path


def written(job: ExportJob, *names: str) -> ExportJob:
    """The job completed with these files of its destination, written."""
    for name in names:
        path = Path(job.destination) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1" + name.encode())
    return report(
        job,
        JobStatus.COMPLETED,
        row_count=1,
        size_bytes=10,
        files=tuple(f"{job.destination}/{name}" for name in names),
    )


def test_a_local_file_downloads_as_an_attachment(alice, acme, local_storage):
    services.create_snapshot(mapping(of=acme))
    job = written(claim_jobs("w1", 1)[0], "g1/part-0.parquet")

    response = alice.get(job_url(job, "files/0"))

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="part-0.parquet"'
    assert b"".join(response.streaming_content) == b"PAR1g1/part-0.parquet"
    assert alice.get(job_url(job, "files/1")).status_code == 404  # no such file listed


def test_a_file_outside_the_destination_is_refused(alice, acme, local_storage):
    secret = local_storage / "secret.txt"
    secret.write_text("not an export")
    services.create_snapshot(mapping(of=acme))
    job = claim_jobs("w1", 1)[0]
    link = Path(job.destination) / "g1" / "link.parquet"
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    # A link inside pointing out passes the report's check; the rows' paths outside were
    # refused when reported, so they are written behind the engine's back here.
    report(job, JobStatus.COMPLETED, row_count=1, size_bytes=1, files=(str(link),))
    ExportJob.objects.filter(pk=job.pk).update(
        files=[str(link), str(secret), f"{job.destination}/../../../../secret.txt"]
    )

    for index in range(3):
        assert alice.get(job_url(job, f"files/{index}")).status_code == 404, index


# --- tenants ----------------------------------------------------------------------------------


def test_another_tenants_mappings_snapshots_and_files_are_not_found(alice, globex, local_storage):
    theirs = mapping("secret-mapping", of=globex)
    snap = services.create_snapshot(theirs)
    job = written(claim_jobs("w1", 1)[0], "g1/part-0.parquet")

    assert "secret-mapping" not in page(alice, MAPPINGS)
    assert "secret-mapping" not in page(alice, SNAPSHOTS)
    for url in (f"{MAPPINGS}{theirs.pk}/change/", snapshot_url(snap)):
        assert alice.get(url).status_code == 302  # the admin's "no such object" redirect
    assert alice.get(job_url(job, "files/0")).status_code == 404
    assert alice.post(f"{MAPPINGS}{theirs.pk}/take-snapshot/").status_code == 404
    assert alice.post(job_url(job, "retry")).status_code == 404
    assert alice.post(f"{SNAPSHOTS}{snap.pk}/cancel/").status_code == 404
    alice.post(SNAPSHOTS, {"action": "cancel_snapshots", "_selected_action": [snap.pk], "post": "yes"})
    snap.refresh_from_db()
    assert snap.status == SnapshotStatus.CREATING and Snapshot.objects.count() == 1


def test_platform_operators_see_every_tenant_and_filter_by_it(acme, globex):
    olga = browser(staff("olga", operator=True))
    mine, theirs = (services.create_snapshot(mapping(of=acme)), services.create_snapshot(mapping(of=globex)))

    listing = page(olga, f"{SNAPSHOTS}?tenant__id__exact={globex.pk}")

    assert snapshot_url(theirs) in listing and snapshot_url(mine) not in listing
    assert '<td class="field-tenant nowrap">Globex</td>' in listing


# --- the export settings ----------------------------------------------------------------------


def test_a_platform_operator_changes_the_maximum_duration_and_is_recorded(acme):
    operator = staff("olga", operator=True)
    olga = browser(operator)

    assert olga.post(f"{CONFIG}1/change/", {"max_duration_seconds": "30"}).status_code == 200
    olga.post(f"{CONFIG}1/change/", {"max_duration_seconds": "7200"})

    config = ExportConfig.current()
    assert (config.max_duration_seconds, config.updated_by) == (7200, operator)


def test_tenant_staff_see_the_export_settings_but_cannot_change_them(alice):
    ExportConfig.current()

    html = page(alice, f"{CONFIG}1/change/")
    alice.post(f"{CONFIG}1/change/", {"max_duration_seconds": "120"})

    assert 'name="max_duration_seconds"' not in html
    assert ExportConfig.current().max_duration_seconds == 3600
    assert alice.get(f"{CONFIG}add/").status_code == 403
    assert alice.post(f"{CONFIG}1/delete/", {"post": "yes"}).status_code == 403


# --- the Trino bindings -------------------------------------------------------------------------


def binding_form(tenant, role: str = "analytics", catalogs: str = "lake, hive") -> dict[str, str]:
    return {"tenant": str(tenant.pk), "role": role, "catalogs": catalogs}


def test_a_platform_operator_binds_a_tenants_role_and_catalogs(acme):
    operator = staff("olga", operator=True)
    olga = browser(operator)

    response = olga.post(f"{BINDINGS}add/", binding_form(acme, catalogs="lake, hive, lake"))

    assert response.status_code == 302, response.context["adminform"].errors
    bound = TrinoBinding.objects.get()
    assert (bound.tenant, bound.role, bound.catalogs, bound.updated_by) == (
        acme,
        "analytics",
        ["hive", "lake"],
        operator,
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"role": "analytics\r\nX-Trino-User: admin"}, "role"),
        ({"role": ""}, "role"),
        ({"catalogs": "lake, hr pay"}, "catalogs"),
    ],
)
def test_a_bad_binding_is_a_form_error(acme, fields, field):
    olga = browser(staff("olga", operator=True))

    response = olga.post(f"{BINDINGS}add/", {**binding_form(acme), **fields})

    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert not TrinoBinding.objects.exists()


def test_tenant_staff_see_their_binding_read_only_and_cannot_change_it(alice, acme, globex):
    mine = binding(acme, role="analytics", catalogs=("lake",))
    theirs = binding(globex, role="globex-role")

    html = page(alice, f"{BINDINGS}{mine.pk}/change/")
    alice.post(f"{BINDINGS}{mine.pk}/change/", binding_form(acme, role="role-b", catalogs="hr"))

    assert "analytics" in html and 'name="role"' not in html and 'name="catalogs"' not in html
    mine.refresh_from_db()
    assert (mine.role, mine.catalogs) == ("analytics", ["lake"])
    assert alice.get(f"{BINDINGS}add/").status_code == 403
    assert alice.post(f"{BINDINGS}add/", binding_form(acme, role="role-b")).status_code == 403
    assert alice.post(f"{BINDINGS}{mine.pk}/delete/", {"post": "yes"}).status_code == 403
    assert "globex-role" not in page(alice, BINDINGS)
    assert alice.get(f"{BINDINGS}{theirs.pk}/change/").status_code == 302  # no such object
    assert TrinoBinding.objects.count() == 2
