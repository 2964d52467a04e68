"""A bulk ingest is all or nothing for readers: its rows are read only once its closing
recalculation makes its load current; a failed, cancelled or unfinished one's never are,
and retention removes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command

import jobs
from factors import aggregation, emissions, entry_ingest, entry_loads, services, stats
from factors.models import DataEntry, EntryLoad, ReportModule
from jobs import engine
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.support.base import as_user, staff, tenant
from tests.support.factors.builders import (
    PLANE_FACTORS,
    csv_bytes,
    dispatch,
    expected_totals,
    module,
    plane_factors,
    plane_rows,
    report,
)

pytestmark = pytest.mark.django_db

HEADER = ["quantity", "unit", "haul", "cabin"]
DAY = 24 * 3600


@pytest.fixture
def travel(settings) -> ReportModule:
    settings.FACTORS_INGEST_BATCH_ROWS = 1_000
    settings.FACTORS_RECALC_CHUNK_ROWS = 2_000
    plane_factors()
    return module(report(tenant=tenant("Acme")))


class BatchBreaker:
    """Makes the n-th batch COPY from now on fail for good (``PermanentError``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.countdown = 0
        real = entry_ingest._copy

        def copy(rows: bytes) -> None:
            self.countdown -= 1
            if self.countdown == 0:
                raise jobs.PermanentError("the disk said no")
            real(rows)

        monkeypatch.setattr(entry_ingest, "_copy", copy)

    def arm(self, n: int) -> None:
        self.countdown = n


@pytest.fixture
def break_batch(monkeypatch) -> BatchBreaker:
    return BatchBreaker(monkeypatch)


def break_closing(monkeypatch: pytest.MonkeyPatch) -> Callable[..., object]:
    """Make every closing recalculation fail for good; returns the real function."""
    real = emissions.recalculate

    def fail_the_closing_one(scope, ctx):
        if "closes" in ctx.payload:
            raise jobs.PermanentError("the closing recalculation broke")
        return real(scope, ctx)

    monkeypatch.setattr(emissions, "recalculate", fail_the_closing_one)
    return real


def upload(travel: ReportModule, rows: list[list[str]]) -> Job:
    job = dispatch(travel, csv_bytes(HEADER, rows)).job
    run_until_idle()
    job.refresh_from_db()
    return job


def read_totals(travel: ReportModule) -> tuple[int, str, int]:
    travel.refresh_from_db()
    return travel.stats["entries"], travel.stats["kg_co2e"], travel.stats["without_factor"]


def expected(rows: list[list[str]]) -> tuple[int, str, int]:
    count, _quantity, kg, missing = expected_totals(rows, PLANE_FACTORS)
    return count, stats.amount(kg), missing


@pytest.fixture
def half_failed(travel, break_batch, clock):
    """The module's entries from a first upload, and a second, larger upload that failed
    for good after three batches of its rows were committed."""
    first = plane_rows(500)
    upload(travel, first)
    break_batch.arm(4)
    second = upload(travel, plane_rows(6_000, start=500))
    assert second.state == Job.State.FAILED
    assert DataEntry.objects.filter(job=second).count() == 3_000  # in the table, unread
    return first, second


def test_a_failed_upload_is_never_read_and_the_earlier_entries_stay(travel, half_failed):
    first, second = half_failed
    assert EntryLoad.objects.get(job=second).state == EntryLoad.State.LOADING
    assert DataEntry.objects.current().filter(module=travel).count() == 500
    assert aggregation.module_totals(travel.pk)[0].entries == 500
    services.recompute_stats([travel.report_id])
    run_until_idle()
    assert read_totals(travel) == expected(first)


def test_the_api_and_edits_do_not_reach_a_failed_uploads_rows(travel, half_failed):
    _first, second = half_failed
    client = as_user(staff("tess", of=tenant("Acme")))
    base = f"/v1/carbon_reports/{travel.report_id}/modules/travel/data-entries"
    listed = client.get(base, {"page_size": 500}).json()  # the largest page
    assert len(listed["results"]) == 500 and listed["next"] is None
    assert not any(
        row["id"] in set(DataEntry.objects.filter(job=second).values_list("pk", flat=True))
        for row in listed["results"]
    )
    hidden = DataEntry.objects.filter(job=second).first()
    assert client.get(f"{base}/{hidden.pk}").status_code == 404
    with pytest.raises(services.InvalidRequest):
        services.update_entry(travel.pk, hidden.pk, {"quantity": "1"}, actor=None)
    with pytest.raises(services.InvalidRequest):
        services.delete_entry(travel.pk, hidden.pk, actor=None)


def test_the_admin_lists_the_entries_the_report_reads(admin_client, travel, half_failed):
    page = admin_client.get("/admin/factors/dataentry/", {"module__module_type__exact": "travel"})
    assert page.status_code == 200
    assert page.context["cl"].result_count == 500


def test_a_successful_upload_replaces_the_earlier_one_at_once(travel, clock):
    first = upload(travel, plane_rows(500))
    rows = plane_rows(4_500, start=500)
    second = upload(travel, rows)

    closing = Job.objects.get(pipeline_id=second.pipeline_id, payload__closes=second.pk)
    assert closing.result["made_current"] == second.pk and closing.result["replaced"] == 500
    assert not DataEntry.objects.filter(job=first).exists()
    assert not EntryLoad.objects.filter(job=first).exists()
    assert EntryLoad.objects.get(job=second).state == EntryLoad.State.CURRENT
    assert read_totals(travel) == expected(rows)


def test_until_its_closing_recalculation_ends_an_upload_is_not_read(travel, clock, monkeypatch):
    first = plane_rows(500)
    upload(travel, first)
    real = break_closing(monkeypatch)
    rows = plane_rows(3_000, start=500)
    second = upload(travel, rows)
    closing = Job.objects.get(pipeline_id=second.pipeline_id, payload__closes=second.pk)
    assert (second.state, closing.state) == (Job.State.SUCCEEDED, Job.State.FAILED)
    assert DataEntry.objects.current().filter(module=travel).count() == 500
    assert read_totals(travel) == expected(first)

    monkeypatch.setattr(emissions, "recalculate", real)  # the fault is mended; retry it
    engine.retry(closing)
    run_until_idle()
    assert EntryLoad.objects.get(job=second).state == EntryLoad.State.CURRENT
    assert read_totals(travel) == expected(rows)


def test_retention_waits_out_the_age_then_removes_an_abandoned_load(travel, half_failed, clock):
    _first, second = half_failed
    age = timedelta(hours=24)
    assert entry_loads.prune(older_than=age).as_dict() == {"loads": 0, "rows": 0}
    clock.advance(DAY + 1)
    assert entry_loads.removable(older_than=age) == [second.pk]
    assert entry_loads.prune(older_than=age).as_dict() == {"loads": 1, "rows": 3_000}
    assert not DataEntry.objects.filter(job=second).exists()
    assert DataEntry.objects.current().filter(module=travel).count() == 500  # untouched


def test_retention_keeps_the_rows_of_an_ingest_an_operator_retried(travel, half_failed, clock):
    _first, second = half_failed
    clock.advance(DAY + 1)
    engine.retry(second)
    assert entry_loads.prune(older_than=timedelta(0)).loads == 0
    assert DataEntry.objects.filter(job=second).count() == 3_000


def test_a_retry_after_retention_loads_every_row_once_and_is_read(travel, half_failed, clock):
    _first, second = half_failed
    clock.advance(DAY + 1)
    entry_loads.prune(older_than=timedelta(hours=24))
    engine.retry(second)
    run_until_idle()
    second.refresh_from_db()
    assert second.state == Job.State.SUCCEEDED and second.result["resumed_from"] == 0
    numbers = sorted(DataEntry.objects.current().filter(module=travel).values_list("row_number", flat=True))
    assert numbers == list(range(2, 6_002))
    assert read_totals(travel) == expected(plane_rows(6_000, start=500))


def test_a_load_is_made_current_only_in_its_own_module(travel, clock):
    ingest = upload(travel, plane_rows(10))
    with pytest.raises(jobs.PermanentError, match="no rows of ingest"):
        entry_loads.make_current(
            jobs.JobContext(ingest, clock),
            ingest.pk,
            module_id=travel.pk + 1,
            on_switch=lambda module_id: None,
        )


def test_the_prune_command_lists_then_removes(travel, half_failed, clock):
    _first, second = half_failed
    out = StringIO()
    call_command("factors_prune_loads", "--hours", "0", "--dry-run", stdout=out)
    assert f"load of job {second.pk}" in out.getvalue() and "Would remove 1 load(s)" in out.getvalue()
    assert DataEntry.objects.filter(job=second).count() == 3_000
    call_command("factors_prune_loads", "--hours", "0", stdout=out)
    assert "Removed 1 load(s), 3000 row(s)." in out.getvalue()
    with pytest.raises(CommandError, match="--hours"):
        call_command("factors_prune_loads", "--hours", "-1")


def test_an_operator_removes_a_load_from_the_admin_as_themself(admin_client, admin_user, travel, half_failed):
    _first, second = half_failed
    response = admin_client.post(
        "/admin/factors/entryload/", {"action": "remove", "_selected_action": [second.pk]}
    )
    assert response.status_code == 302
    job = Job.objects.get(type="factors.prune_loads")
    assert (job.created_by, job.payload) == (admin_user, {"loads": [second.pk]})
    run_until_idle()
    assert not DataEntry.objects.filter(job=second).exists()


def viewer(username: str, of: str) -> User:
    """Tenant staff allowed to view loads (as a deployment's group would allow)."""
    user = staff(username, of=tenant(of))
    user.user_permissions.add(Permission.objects.get(codename="view_entryload"))
    return user


def test_tenant_staff_see_their_loads_but_may_not_remove_them(client, travel, half_failed):
    _first, second = half_failed
    client.force_login(viewer("tess", "Acme"))
    page = client.get("/admin/factors/entryload/")
    assert page.status_code == 200 and page.context["cl"].result_count == 2
    assert page.context["action_form"] is None  # no action offered
    refused = client.post("/admin/factors/entryload/", {"action": "remove", "_selected_action": [second.pk]})
    assert refused.status_code in (200, 302, 403)
    assert not Job.objects.filter(type="factors.prune_loads").exists()
    client.force_login(viewer("gina", "Globex"))
    assert client.get("/admin/factors/entryload/").context["cl"].result_count == 0


def test_the_latest_upload_wins_whichever_closing_recalculation_ends_last(travel, clock, monkeypatch):
    upload(travel, plane_rows(100))
    real = break_closing(monkeypatch)
    older = upload(travel, plane_rows(300, start=100))
    monkeypatch.setattr(emissions, "recalculate", real)
    rows = plane_rows(200, start=400)
    newer = upload(travel, rows)  # accepted: the older ingest itself has finished
    assert EntryLoad.objects.get(job=newer).state == EntryLoad.State.CURRENT

    closing = Job.objects.get(pipeline_id=older.pipeline_id, payload__closes=older.pk)
    engine.retry(closing)  # an operator retries the older upload's closing step
    run_until_idle()

    closing.refresh_from_db()
    assert closing.state == Job.State.SUCCEEDED
    assert (closing.result["superseded_by"], closing.result["replaced"]) == (newer.pk, 300)
    assert not EntryLoad.objects.filter(job=older).exists()
    assert EntryLoad.objects.get(job=newer).state == EntryLoad.State.CURRENT
    assert read_totals(travel) == expected(rows)


def test_the_stats_follow_a_switch_even_when_its_job_fails_after_it(travel, clock, monkeypatch):
    upload(travel, plane_rows(100))
    monkeypatch.setattr(entry_loads, "_delete_replaced", _broken_delete)
    rows = plane_rows(300, start=100)
    second = upload(travel, rows)
    closing = Job.objects.get(pipeline_id=second.pipeline_id, payload__closes=second.pk)
    assert closing.state == Job.State.FAILED  # after the switch: deleting the old rows broke
    assert EntryLoad.objects.get(job=second).state == EntryLoad.State.CURRENT
    assert read_totals(travel) == expected(rows)  # the aggregation was queued with the switch
    monkeypatch.undo()
    clock.advance(DAY + 1)
    assert entry_loads.prune(older_than=timedelta(hours=24)).rows == 100  # the replaced rows


def _broken_delete(job_id: int, *, fence: Job | None = None) -> int:
    raise jobs.PermanentError("the disk said no")


def test_replaced_rows_go_in_batches_each_under_the_module_lock(travel, clock, settings, monkeypatch):
    monkeypatch.setattr(entry_loads, "DELETE_BATCH_ROWS", 400)
    first = upload(travel, plane_rows(1_000))
    batches: list[int] = []
    real = entry_loads._delete_rows

    def counted(load, limit=None):
        batches.append(real(load, limit))
        return batches[-1]

    monkeypatch.setattr(entry_loads, "_delete_rows", counted)
    second = upload(travel, plane_rows(10, start=1_000))
    assert batches == [400, 400, 200]
    closing = Job.objects.get(pipeline_id=second.pipeline_id, payload__closes=second.pk)
    assert closing.result["replaced"] == 1_000
    assert not DataEntry.objects.filter(job=first).exists()
    assert not EntryLoad.objects.filter(job=first).exists()
