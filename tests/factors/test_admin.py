"""The admin pages: reports with their modules' badge, entries, factors with the stale
filter, emissions, and the upload forms that start the same pipelines."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from factors.models import CarbonReport, DataEntry, EmissionFactor
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.base import staff, tenant
from tests.factors.builders import csv_bytes, dispatch, module, plane_factors, plane_rows, report

pytestmark = pytest.mark.django_db

HEADER = ["quantity", "unit", "haul", "cabin"]


@pytest.fixture
def travel():
    plane_factors()
    return module(report())


def test_a_report_page_shows_stats_and_a_recalculating_badge_while_a_pipeline_runs(
        admin_client, travel, clock):
    dispatch(travel, csv_bytes(HEADER, plane_rows(40)))
    url = f"/admin/factors/carbonreport/{travel.report_id}/change/"

    page = admin_client.get(url).content.decode()
    assert "Recalculating…" in page

    run_until_idle()
    page = admin_client.get(url).content.decode()
    assert "Recalculating…" not in page and "Up to date" in page
    assert "40 entries" in page


def test_every_factors_page_answers_with_rows_in_it(admin_client, travel, clock):
    dispatch(travel, csv_bytes(HEADER, plane_rows(10)))
    run_until_idle()
    entry = DataEntry.objects.first()
    for url in ["/admin/factors/unit/", f"/admin/factors/unit/{travel.report.unit_id}/change/",
                "/admin/factors/carbonreport/", "/admin/factors/dataentry/",
                f"/admin/factors/dataentry/{entry.pk}/change/", "/admin/factors/emissionfactor/",
                f"/admin/factors/emissionfactor/{EmissionFactor.objects.first().pk}/change/",
                "/admin/factors/emission/", f"/admin/factors/emission/{entry.pk}/change/",
                "/admin/factors/dataentry/upload/", "/admin/factors/emissionfactor/upload/",
                "/admin/factors/unit/upload/", "/admin/factors/carbonreport/add/"]:
        assert admin_client.get(url).status_code == 200, url


def test_the_stale_filter_lists_factors_left_out_of_the_latest_upload(admin_client, travel):
    EmissionFactor.objects.filter(classification__haul="long").update(is_stale=True)

    page = admin_client.get("/admin/factors/emissionfactor/?stale=yes").content.decode()

    assert page.count('class="field-data_entry_type"') == 2


def test_the_entries_upload_form_starts_the_pipeline_as_the_staff_user(admin_client, admin_user,
                                                                       travel, clock):
    response = admin_client.post("/admin/factors/dataentry/upload/", {
        "report": travel.report_id, "module_type": "travel", "data_entry_type": "plane",
        "file": SimpleUploadedFile("e.csv", csv_bytes(HEADER, plane_rows(5)))})

    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.type, job.created_by) == ("factors.csv_ingest", admin_user)


def test_a_refused_upload_lists_its_errors_and_starts_nothing(admin_client, travel):
    response = admin_client.post("/admin/factors/dataentry/upload/", {
        "report": travel.report_id, "module_type": "travel", "data_entry_type": "plane",
        "file": SimpleUploadedFile("e.csv", b"quantity,unit,haul,cabin\nabc,km,short,economy\n")})

    page = response.content.decode()
    assert response.status_code == 200
    assert "1 error: nothing was written" in page and "not a number" in page
    assert not Job.objects.exists()


def test_the_factor_upload_form_is_for_platform_operators(client, travel):
    client.force_login(staff("tess", of=tenant("Acme")))
    assert client.get("/admin/factors/emissionfactor/upload/").status_code == 403


def test_opening_a_report_in_the_admin_creates_its_modules(admin_client, travel):
    response = admin_client.post("/admin/factors/carbonreport/add/",
                                 {"unit": travel.report.unit_id, "year": 2025})
    assert response.status_code == 302
    assert CarbonReport.objects.get(year=2025).modules.count() == 3


def test_recompute_stats_queues_one_aggregation_per_module(admin_client, admin_user, travel, clock):
    admin_client.post("/admin/factors/carbonreport/", {
        "action": "recompute_stats", "_selected_action": [travel.report_id]})
    assert Job.objects.filter(type="factors.aggregation", created_by=admin_user).count() == 3
