"""The Content-Security-Policy header, and pages that keep within it without a browser
(tests/browser/test_csp.py has Chromium's word on it)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from ingest.runs import services as ingest_services
from jobs.events import publish
from tests.support.base import make_job, staff, tenant
from tests.support.ingest import builders as ingest_builders

pytestmark = pytest.mark.django_db


def policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {name: values for name, *values in (part.split() for part in header.split(";"))}


@pytest.fixture
def root_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-root"))
    return client


def test_every_kind_of_response_carries_the_policy(root_client):
    responses = [
        Client().get("/admin/login/"),
        root_client.get("/admin/"),
        APIClient().get("/api/jobs/"),
        root_client.get("/api/docs/"),
        root_client.get("/api/schema/"),
    ]

    for response in responses:
        directives = policy(response)
        assert directives["default-src"] == ["'self'"]
        assert directives["connect-src"] == ["'self'"]
        assert directives["object-src"] == ["'none'"] and directives["base-uri"] == ["'none'"]
        assert directives["frame-ancestors"] == ["'none'"]


def test_no_inline_script_or_style_is_allowed_except_by_nonce(root_client):
    # A job's page: one of the pages that still has a <style> of its own.
    response = root_client.get(f"/admin/jobs/job/{make_job('tests.noop').pk}/change/")
    header, directives = response["Content-Security-Policy"], policy(response)

    assert "unsafe-inline" not in header and "unsafe-eval" not in header
    assert directives["script-src"][0] == "'self'" and directives["style-src"][0] == "'self'"
    assert [value.startswith("'nonce-") for value in directives["style-src"][1:]] == [True]


def test_the_nonce_is_the_pages_and_new_on_every_response(root_client):
    url = f"/admin/jobs/job/{make_job('tests.noop').pk}/change/"
    first, second = (root_client.get(url) for _ in range(2))

    nonces = []
    for response in (first, second):
        nonce = policy(response)["style-src"][1].removeprefix("'nonce-").removesuffix("'")
        assert f'<style nonce="{nonce}">' in response.content.decode()
        nonces.append(nonce)
    assert nonces[0] != nonces[1]


def test_our_pages_have_no_style_attribute_inline_script_or_unnonced_style(root_client):
    job = make_job("tests.noop", tenant=tenant())
    event = publish("tests.Happened", {"n": 1})
    run = ingest_services.start_ingest(ingest_builders.source(tenant()))
    pages = [
        "/admin/",
        "/admin/jobs/job/",
        f"/admin/jobs/job/{job.pk}/change/",
        f"/admin/jobs/job/pipeline/{job.pipeline_id}/",
        f"/admin/jobs/job/pipeline/{job.pipeline_id}/graph/",
        "/admin/jobs/job/dashboard/",
        f"/admin/jobs/event/{event.pk}/change/",
        "/admin/jobs/event/",
        "/admin/factors/dataentry/upload/",
        "/api/docs/",
        "/admin/axes/accessattempt/",
        "/admin/ingest/ingestsource/",
        "/admin/ingest/ingestsource/add/",
        f"/admin/ingest/ingestsource/{run.source_id}/change/",
        "/admin/ingest/ingestrun/",
        f"/admin/ingest/ingestrun/{run.pk}/change/",
        f"/admin/ingest/ingestrun/{run.pk}/timeline/",
        "/admin/ingest/runnerbreaker/",
        "/admin/ingest/hooktemplate/",
        "/admin/ingest/hooktemplate/add/",
        f"/admin/ingest/hooktemplate/{run.source.hooks.get().template_id}/change/",
    ]

    for url in pages:
        response = root_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not re.search(r"\sstyle=", html), url
        assert not re.search(r"<script(?![^>]*\ssrc=)(?![^>]*application/json)[^>]*>", html), url
        assert not re.search(r"<style(?![^>]*\snonce=)[^>]*>", html), url


def test_a_tenants_staff_page_keeps_within_the_policy_too():
    client = Client()
    client.force_login(staff("alice", of=tenant()))
    job = make_job("tests.noop")

    html = client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()

    assert not re.search(r"\sstyle=", html)
