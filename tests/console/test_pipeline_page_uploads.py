"""The factors admin leads to the pipeline page: an upload lands on it, and a report's
module badges carry what the page's script needs to keep them live."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from factors import catalog
from jobs.models import Job
from tests.support.base import granted, staff, tenant
from tests.support.factors.builders import csv_bytes, module, plane_rows, report

pytestmark = pytest.mark.django_db

HEADER = ["quantity", "unit", "haul", "cabin"]
UNIT = catalog.spec("plane").unit


def upload(client, travel) -> object:
    return client.post(
        "/admin/factors/dataentry/upload/",
        {
            "report": travel.report_id,
            "module_type": "travel",
            "data_entry_type": "plane",
            "file": SimpleUploadedFile("e.csv", csv_bytes(HEADER, plane_rows(5))),
        },
    )


def test_an_entries_upload_redirects_to_its_pipeline_page(admin_client):
    travel = module(report())

    response = upload(admin_client, travel)

    job = Job.objects.get()
    assert response.status_code == 302
    assert response.url == reverse("admin:jobs_job_pipeline", args=[job.pipeline_id])
    assert admin_client.get(response.url).status_code == 200


def test_a_factors_upload_redirects_to_its_pipeline_page(admin_client):
    body = csv_bytes(["year", "haul", "cabin", "value", "unit"], [["2024", "short", "economy", "0.1", UNIT]])

    response = admin_client.post(
        "/admin/factors/emissionfactor/upload/",
        {"data_entry_type": "plane", "file": SimpleUploadedFile("f.csv", body)},
    )

    job = Job.objects.get()
    assert response.url == reverse("admin:jobs_job_pipeline", args=[job.pipeline_id])


def test_staff_who_may_not_see_jobs_return_to_the_list_after_an_upload(client):
    acme = tenant("Acme")
    travel = module(report(tenant=acme))
    client.force_login(granted(staff("alice", of=acme), "factors.operate_dataentry"))

    response = upload(client, travel)

    assert response.url == reverse("admin:factors_dataentry_changelist")


def test_a_report_pages_badges_name_their_module_for_the_live_script(admin_client):
    travel = module(report())

    page = admin_client.get(reverse("admin:factors_carbonreport_change", args=[travel.report_id]))

    html = page.content.decode()
    assert (
        f'<span class="recalc-badge" data-busy="0" data-report="{travel.report_id}" '
        f'data-module="{travel.pk}">Up to date</span>'
    ) in html
    assert "factors/report_live.js" in html and "console/live.js" in html
