"""A factors job's page says what it works for: the carbon report's module."""

from __future__ import annotations

import pytest

from tests.support.base import make_job, page, tenant
from tests.support.factors import builders

pytestmark = pytest.mark.django_db


def test_an_aggregation_job_links_its_report(admin_client):
    acme = tenant("Acme")
    report = builders.report(tenant=acme)
    module = builders.module(report)
    job = make_job("factors.aggregation", {"module": module.pk}, tenant=acme.pk)

    text = page(admin_client, f"/admin/jobs/job/{job.pk}/change/")

    assert f'<a href="/admin/factors/carbonreport/{report.pk}/change/">Carbon report {report}, module' in text


def test_a_module_of_another_tenant_is_no_subject(admin_client):
    report = builders.report(tenant=tenant("Globex"))
    job = make_job("factors.aggregation", {"module": builders.module(report).pk}, tenant=tenant("Acme").pk)

    assert "Works for" not in page(admin_client, f"/admin/jobs/job/{job.pk}/change/")
