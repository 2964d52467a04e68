"""Another tenant's ids, at every door.

Acme has reports, entries, a finished pipeline, a failed job, a waiting job, a published
event, a staged upload and a running ingest run. Globex's staff and members hold all of Acme's ids and try
every endpoint of the API (each URL pattern is probed: a new endpoint without a probe
fails ``test_every_endpoint_is_probed``), the event streams, the WebSocket and the
admin. They get refusals that look like "no such thing", listings without Acme's rows,
and Acme's data stays exactly as it was. The job handlers get the same treatment in
``tests/factors/test_job_tenancy.py``.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient, Client
from django.urls import get_resolver
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

import jobs
from console.streams.hub import get_hub
from console.streams.ws import JobEventsConsumer
from exports import services as export_services
from exports.models import ExportJob, Mapping, MappingEntity, Snapshot, TrinoBinding
from factors import csv_schemas, staging
from factors.models import CarbonReport, DataEntry, Emission, ReportModule, Upload
from ingest.runs import breaker
from ingest.runs import services as ingest_services
from ingest.runs.models import HookTemplate, IngestRun, RunAction, RunnerBreaker
from ingest.scraping import services as scraping
from ingest.scraping.models import IngestionHandoff, ScrapeReference
from jobs.models import Delivery, Event, Job
from jobs.worker import run_until_idle
from market.models import MarketFeed, SourceFreshness
from tests.support.base import granted, make_job, staff, tenant
from tests.support.exports.builders import binding, claim_jobs
from tests.support.exports.builders import report as report_export
from tests.support.factors.builders import csv_bytes, dispatch, module, plane_factors, plane_rows, report
from tests.support.ingest import builders as ingest_builders

pytestmark = pytest.mark.django_db

ACME_MARK = "ACME-SECRET-LAB"
SCRAPED = f"scraped-{ACME_MARK}"
HEADER = ["quantity", "unit", "haul", "cabin"]


@dataclass
class Acme:
    tenant: Any
    report: CarbonReport
    travel: ReportModule
    entry: DataEntry
    ingest: Job
    failed: Job
    waiting: Job
    event: Event
    upload: staging.StagedUpload
    run: IngestRun
    handoff: IngestionHandoff
    mapping: Mapping
    export: Snapshot


@pytest.fixture(autouse=True)
def upload_dir(tmp_path, settings):
    settings.INTAKE_STAGING_URL = str(tmp_path / "staging")


@pytest.fixture
def acme(clock) -> Acme:
    owner = tenant("Acme")
    plane_factors()
    the_report = report(ACME_MARK, tenant=owner)
    travel = module(the_report, "travel")
    started = dispatch(travel, csv_bytes(HEADER, plane_rows(12)))
    run_until_idle()
    failed = make_job("tests.permanent", {"secret": ACME_MARK}, tenant=owner)
    run_until_idle()
    waiting = make_job(
        "tests.noop", {"secret": ACME_MARK}, tenant=owner, run_after=clock.now().replace(year=2030)
    )
    event = jobs.publish("OrderPlaced", {"secret": ACME_MARK}, tenant=owner)
    _, upload = staging.stage(io.BytesIO(csv_bytes(HEADER, plane_rows(3))), csv_schemas.entries("plane"))
    staging.register(upload, Upload.Kind.ENTRIES, tenant_id=owner.pk)
    run = ingest_services.start_ingest(ingest_builders.source(owner, ACME_MARK))
    scraped = ingest_builders.source(owner, SCRAPED, kind="scraped_reference", config={})
    scraping.sync(scraped, ACME_MARK, [{"external_id": ACME_MARK, "payload": {"m": ACME_MARK}}])
    feed = MarketFeed.objects.create(
        tenant=owner, name=f"feed-{ACME_MARK}".lower(), api_url="http://127.0.0.1:9/", token=ACME_MARK
    )
    SourceFreshness.objects.create(
        feed=feed, dataset="daily", last_failure=clock.now(), last_error=f"daily: {ACME_MARK} refused"
    )
    binding(owner, role=ACME_MARK, catalogs=(ACME_MARK.lower(),))
    mapping = Mapping.objects.create(tenant=owner, name="acme-graph", description=ACME_MARK)
    MappingEntity.objects.create(
        mapping=mapping, kind="node", name=ACME_MARK, dataset="units", columns=["id", "code"]
    )
    export = export_services.create_snapshot(mapping)
    report_export(claim_jobs("acme-worker", 1)[0], "failed", error_message=ACME_MARK)
    export_services.create_snapshot(mapping)  # and one pending
    return Acme(
        owner,
        the_report,
        travel,
        DataEntry.objects.filter(module=travel).first(),
        started.job,
        Job.objects.get(pk=failed.pk),
        waiting,
        event,
        upload,
        run,
        IngestionHandoff.objects.get(source=scraped),
        mapping,
        export,
    )


def snapshot(acme: Acme) -> tuple[Any, ...]:
    return (
        sorted(
            Job.objects.filter(tenant=acme.tenant).values_list(
                "id", "state", "attempts", "run_after", "max_attempts"
            )
        ),
        sorted(DataEntry.objects.filter(module=acme.travel).values_list("id", "quantity", "unit")),
        sorted(Emission.objects.values_list("data_entry_id", "kg_co2e")),
        ReportModule.objects.get(pk=acme.travel.pk).stats,
        CarbonReport.objects.get(pk=acme.report.pk).stats,
        Upload.objects.filter(tenant=acme.tenant).count(),
        sorted(IngestRun.objects.filter(tenant=acme.tenant).values_list("id", "status")),
        RunAction.objects.filter(run__tenant=acme.tenant).count(),
        sorted(
            IngestionHandoff.objects.filter(tenant=acme.tenant).values_list("id", "status", "reason_code")
        ),
        sorted(ScrapeReference.objects.filter(tenant=acme.tenant).values_list("id", "payload_hash")),
        sorted(Snapshot.objects.filter(tenant=acme.tenant).values_list("id", "status")),
        sorted(ExportJob.objects.filter(tenant=acme.tenant).values_list("id", "status", "generation")),
        sorted(Delivery.objects.filter(event__tenant=acme.tenant).values_list("id", "quarantined_at")),
        sorted(
            HookTemplate.objects.filter(hooks__source__tenant=acme.tenant).values_list(
                "id", "image", "command", "enabled"
            )
        ),
        sorted(RunnerBreaker.objects.filter(tenant=acme.tenant).values_list("id", "state")),
    )


def token_client(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def globex() -> dict[str, APIClient]:
    other = tenant("Globex")
    return {
        # Staff who may start runs, take snapshots, sync references and enqueue jobs: the
        # API asks where their tenant ends, not only what they may do.
        "staff": token_client(
            granted(
                staff("gina", of=other),
                "ingest.operate_ingestrun",
                "exports.add_snapshot",
                "ingest.add_scrapereference",
                "jobs.add_job",
            )
        ),
        "member": token_client(staff("gus", of=other, is_staff=False)),
    }


def probes(acme: Acme) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    """(URL name, method, path, body) with Acme's ids in every slot."""
    report_id, job = acme.report.pk, acme.failed.pk
    module_path = f"/v1/carbon_reports/{report_id}/modules/travel"
    entries = f"{module_path}/data-entries"
    csv_file = csv_bytes(HEADER, plane_rows(2))
    return [
        ("job-detail", "get", f"/api/jobs/{job}/", None),
        ("job-cancel", "post", f"/api/jobs/{acme.waiting.pk}/cancel/", {}),
        ("job-recover", "post", f"/api/jobs/{acme.waiting.pk}/recover/", {}),
        ("job-retry", "post", f"/api/jobs/{job}/retry/", {}),
        ("job-run-now", "post", f"/api/jobs/{acme.waiting.pk}/run-now/", {}),
        ("sync-job-recover", "post", f"/sync/jobs/{acme.waiting.pk}/recover", {}),
        ("event-detail", "get", f"/api/events/{acme.event.pk}/", None),
        ("factors-report", "get", f"/v1/carbon_reports/{report_id}", None),
        ("factors-module", "get", module_path, None),
        ("factors-entries", "get", entries, None),
        (
            "factors-entries",
            "post",
            entries,
            {
                "data_entry_type": "plane",
                "quantity": "1",
                "classification": {"haul": "short", "cabin": "economy"},
            },
        ),
        ("factors-entry", "get", f"{entries}/{acme.entry.pk}", None),
        ("factors-entry", "patch", f"{entries}/{acme.entry.pk}", {"quantity": "999"}),
        ("factors-entry", "delete", f"{entries}/{acme.entry.pk}", None),
        (
            "factors-dispatch",
            "multipart",
            "/sync/dispatch",
            {
                "report": report_id,
                "module": "travel",
                "data_entry_type": "plane",
                "file": SimpleUploadedFile("e.csv", csv_file),
            },
        ),
        (
            "factors-api-ingest",
            "post",
            "/sync/api-ingest",
            {
                "report": report_id,
                "module": "travel",
                "data_entry_type": "plane",
                "url": "https://example.org/entries.json",
            },
        ),
        (
            "factors-upload",
            "multipart",
            "/sync/factors/plane",
            {"file": SimpleUploadedFile("f.csv", csv_file)},
        ),
        ("factors-units", "post", "/sync/units", {"year": 2024, "url": "https://example.org/units.json"}),
        ("factors-recalculate", "post", "/sync/recalculate-emissions/plane", {"year": 2024}),
        ("factors-pipeline", "get", f"/sync/pipelines/{acme.ingest.pipeline_id}", None),
        ("ingest-run-detail", "get", f"/api/ingest/runs/{acme.run.pk}/", None),
        ("ingest-run-cancel", "post", f"/api/ingest/runs/{acme.run.pk}/cancel/", {}),
        ("ingest-run-retry-hooks", "post", f"/api/ingest/runs/{acme.run.pk}/retry-hooks/", {}),
        ("ingest-run-retry-from-batch", "post", f"/api/ingest/runs/{acme.run.pk}/retry-from-batch/", {}),
        (
            "scraping-sync",
            "post",
            f"/scraping/{SCRAPED}/sync",
            {"scrape_run_id": "globex", "references": [{"external_id": ACME_MARK, "payload": {}}]},
        ),
        ("scraping-handoffs", "get", f"/scraping/{SCRAPED}/handoffs", None),
        ("scraping-handoffs-redrive", "post", f"/scraping/{SCRAPED}/handoffs/redrive", {}),
        ("exports-mapping-detail", "get", f"/api/exports/mappings/{acme.mapping.pk}/", None),
        ("exports-snapshot-detail", "get", f"/api/exports/snapshots/{acme.export.pk}/", None),
        ("exports-snapshot-cancel", "post", f"/api/exports/snapshots/{acme.export.pk}/cancel/", {}),
        # Remote workers' calls: a tenant's token is no remote worker's credential, and
        # export workers are remote workers (Acme's exports, failed and pending, too).
        *remote_worker_probes(acme.failed.pk),
        *remote_worker_probes(export_engine_job(acme)),
        *remote_worker_probes(pending_export_engine_job(acme)),
    ]


def remote_worker_probes(job: int) -> list[tuple[str, str, str, dict[str, Any]]]:
    lease = {"worker": "gina", "lease": "8c4f3c58-44a4-4b39-8f2c-b8a4d4a8f7a1"}
    return [
        ("remote-claim", "post", "/internal/jobs/claim", {"worker": "gina", "limit": 10}),
        ("remote-heartbeat", "post", "/internal/jobs/heartbeat", {**lease, "jobs": [job]}),
        ("remote-release", "post", "/internal/jobs/release", {**lease, "jobs": [job]}),
        ("remote-complete", "post", f"/internal/jobs/{job}/complete", {**lease, "result": {"x": 1}}),
        ("remote-fail", "post", f"/internal/jobs/{job}/fail", {**lease, "error": "x"}),
        ("remote-snooze", "post", f"/internal/jobs/{job}/snooze", {**lease, "seconds": 1}),
    ]


def acme_binding(acme: Acme) -> int:
    return TrinoBinding.objects.values_list("pk", flat=True).get(tenant=acme.tenant)


def export_job(acme: Acme) -> int:
    return ExportJob.objects.filter(snapshot=acme.export).values_list("pk", flat=True).get()


def export_engine_job(acme: Acme) -> int:
    """The engine job of Acme's failed export."""
    return ExportJob.objects.filter(snapshot=acme.export).values_list("job_id", flat=True).get()


def pending_export_engine_job(acme: Acme) -> int:
    """The engine job of Acme's pending export (its other snapshot's): a claim could take it."""
    return (
        ExportJob.objects.filter(tenant=acme.tenant, status="pending").values_list("job_id", flat=True).get()
    )


# Listings and pages that name no object: they answer, but with none of Acme's rows.
LISTINGS = {
    "job-list": "/api/jobs/",
    "event-list": "/api/events/",
    "job-dashboard": "/api/jobs/dashboard/?window=7d",
    "factors-reports": "/v1/carbon_reports",
    "metrics": "/metrics",
    "api-schema": "/api/schema/",
    "api-docs": "/api/docs/",
    "ingest-run-list": "/api/ingest/runs/",
    "quality-status": "/quality/status",
    "exports-mapping-list": "/api/exports/mappings/",
    "exports-snapshot-list": "/api/exports/snapshots/",
    "exports-datasets": "/api/exports/datasets/",
    "factors-factors": "/v1/emission_factors",
    "factors-factor": "/v1/emission_factors/1",  # shared
    "home": "/",  # the addresses of the admin and the API docs, the same for everyone
}


def call(client: APIClient, method: str, path: str, body: dict[str, Any] | None) -> Any:
    if method == "multipart":
        return client.post(path, body, format="multipart")
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


def url_names() -> set[str]:
    names: set[str] = set()

    def walk(patterns: list[Any]) -> None:
        for pattern in patterns:
            if hasattr(pattern, "url_patterns"):
                if not str(pattern.pattern).startswith("admin"):
                    walk(pattern.url_patterns)
            elif pattern.name:
                names.add(pattern.name)

    walk(get_resolver().url_patterns)
    return names


def streams(acme: Acme) -> dict[str, str]:
    """The SSE endpoints (probed in a transactional test: they read on their own
    connections, which see only committed rows)."""
    return {
        "job-events": f"/jobs/{acme.failed.pk}/events",
        "pipeline-events": f"/sync/pipelines/{acme.ingest.pipeline_id}/events",
    }


def test_every_endpoint_is_probed(acme):
    probed = {name for name, *_ in probes(acme)} | set(LISTINGS) | set(streams(acme))
    assert url_names() - probed == set(), "an endpoint has no cross-tenant probe"


@pytest.mark.parametrize("who", ["staff", "member"])
def test_acmes_ids_at_every_endpoint_find_nothing_and_change_nothing(acme, globex, who):
    before = snapshot(acme)
    client = globex[who]

    answers = {(name, method): call(client, method, path, body) for name, method, path, body in probes(acme)}

    statuses = {key: response.status_code for key, response in answers.items()}
    assert all(status in (403, 404) for status in statuses.values()), statuses
    for response in answers.values():
        assert ACME_MARK not in response.content.decode(errors="replace")
    # A run of Acme's source, named by its id: as unknown as a source that does not exist.
    start = client.post("/api/ingest/runs/", {"source": acme.run.source_id}, format="json")
    assert start.status_code == (400 if who == "staff" else 403)
    assert ACME_MARK not in start.content.decode()
    # A snapshot of Acme's mapping, named by its id: as unknown as one that does not exist.
    taken = client.post("/api/exports/snapshots/", {"mapping": acme.mapping.pk}, format="json")
    assert taken.status_code == (400 if who == "staff" else 403)
    assert ACME_MARK not in taken.content.decode()
    assert snapshot(acme) == before


@pytest.mark.parametrize("who", ["staff", "member"])
def test_listings_show_none_of_acmes_rows(acme, globex, who):
    client = globex[who]

    for name, path in LISTINGS.items():
        response = client.get(path)
        assert response.status_code < 500, (name, response.status_code)
        assert ACME_MARK not in response.content.decode(errors="replace"), name
    assert client.get("/api/jobs/").json()["results"] == []
    assert client.get("/api/events/").json()["results"] == []
    assert client.get("/api/ingest/runs/").json()["results"] == []
    assert client.get("/quality/status").json()["sources"] == []
    assert client.get("/api/exports/snapshots/").json()["results"] == []
    assert client.get("/api/exports/mappings/").json()["results"] == []
    dashboard = client.get("/api/jobs/dashboard/?window=7d").json()
    assert dashboard["types"] == [] and dashboard["queues"] == []


def test_the_admin_shows_globex_staff_none_of_acmes_objects(acme):
    gina = staff("gina", of=tenant("Globex"))
    gina.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=["jobs", "factors", "ingest", "market", "exports"]
        )
    )
    browser = Client()
    browser.force_login(gina)
    delivery = acme.event.deliveries.order_by("id").first().pk
    entry = acme.run.source.hooks.get().template  # offered to Acme alone
    for job in range(5):
        breaker.record_failure(
            "kube:conveyor-hooks", acme.tenant.pk, job, f"{ACME_MARK}: pods evicted", jobs.now()
        )
    acme_breaker = RunnerBreaker.objects.get(tenant=acme.tenant)
    pages = [
        f"/admin/jobs/job/{acme.failed.pk}/change/",
        f"/admin/jobs/job/{export_engine_job(acme)}/change/",
        f"/admin/jobs/delivery/{delivery}/change/",
        *(f"/admin/jobs/delivery/{delivery}/{action}/" for action in ("quarantine", "release", "replay")),
        f"/admin/jobs/job/pipeline/{acme.ingest.pipeline_id}/",
        f"/admin/factors/carbonreport/{acme.report.pk}/change/",
        f"/admin/factors/upload/{acme.upload.id}/change/",
        f"/admin/ingest/ingestrun/{acme.run.pk}/change/",
        f"/admin/ingest/ingestrun/{acme.run.pk}/timeline/",
        f"/admin/ingest/ingestsource/{acme.run.source_id}/change/",
        f"/admin/ingest/hooktemplate/{entry.pk}/change/",
        f"/admin/ingest/hooktemplate/{entry.pk}/delete/",
        f"/admin/ingest/runnerbreaker/{acme_breaker.pk}/change/",
        f"/admin/ingest/ingestionhandoff/{acme.handoff.pk}/change/",
        f"/admin/ingest/scrapereference/{acme.handoff.reference_id}/change/",
        f"/admin/ingest/scraperun/{acme.handoff.scrape_run_id}/change/",
        f"/admin/exports/mapping/{acme.mapping.pk}/change/",
        f"/admin/exports/mapping/{acme.mapping.pk}/take-snapshot/",
        f"/admin/exports/snapshot/{acme.export.pk}/change/",
        f"/admin/exports/snapshot/{acme.export.pk}/cancel/",
        f"/admin/exports/snapshot/{acme.export.pk}/jobs/{export_job(acme)}/files/0/",
        f"/admin/exports/trinobinding/{acme_binding(acme)}/change/",
        f"/admin/exports/trinobinding/{acme_binding(acme)}/delete/",
    ]
    for page in pages:
        response = browser.get(page)
        assert response.status_code in (302, 403, 404), page
        assert ACME_MARK not in response.content.decode(errors="replace"), page
    listing = browser.get("/admin/jobs/job/")
    assert listing.status_code == 200 and ACME_MARK not in listing.content.decode()
    bindings = browser.get("/admin/exports/trinobinding/")
    assert bindings.status_code == 200 and ACME_MARK not in bindings.content.decode()
    before = snapshot(acme)
    cancel = browser.post(f"/admin/jobs/job/{acme.waiting.pk}/cancel/")
    assert cancel.status_code in (302, 403, 404)
    assert cancel.status_code != 302 or "/cancel/" not in cancel["Location"]
    for action in ("quarantine", "release", "replay"):
        assert (
            browser.post(
                f"/admin/jobs/delivery/{delivery}/{action}/", {"post": "yes", "reason": "x"}
            ).status_code
            == 404
        )
    browser.post(
        "/admin/jobs/delivery/",
        {"action": "quarantine_deliveries", "post": "yes", "reason": "x", "_selected_action": [delivery]},
    )
    assert browser.post(f"/admin/ingest/ingestrun/{acme.run.pk}/cancel/").status_code == 404
    browser.post(
        "/admin/ingest/runnerbreaker/", {"action": "close_breakers", "_selected_action": [acme_breaker.pk]}
    )
    browser.post(
        f"/admin/ingest/hooktemplate/{entry.pk}/change/",
        {"name": entry.name, "image": "globex/evil:1", "command": '["true"]'},
    )
    browser.post(f"/admin/ingest/hooktemplate/{entry.pk}/delete/", {"post": "yes"})
    assert browser.post(f"/admin/exports/snapshot/{acme.export.pk}/cancel/").status_code == 404
    assert (
        browser.post(f"/admin/exports/snapshot/{acme.export.pk}/jobs/{export_job(acme)}/retry/").status_code
        == 404
    )
    assert browser.post(f"/admin/exports/mapping/{acme.mapping.pk}/take-snapshot/").status_code == 404
    for listing in (
        "/admin/jobs/delivery/",
        "/admin/ingest/ingestrun/",
        "/admin/ingest/ingestsource/",
        "/admin/ingest/ingestionhandoff/",
        "/admin/ingest/scrapereference/",
        "/admin/ingest/scraperun/",
        "/admin/ingest/hooktemplate/",
        "/admin/ingest/runnerbreaker/",
        "/admin/exports/mapping/",
        "/admin/exports/snapshot/",
    ):
        assert ACME_MARK not in browser.get(listing).content.decode(), listing
    assert snapshot(acme) == before


@pytest.mark.django_db(transaction=True)
def test_the_streams_and_the_websocket_refuse_acmes_job_and_pipeline(acme):
    gina = staff("gina", of=tenant("Globex"))

    async def main() -> list[Any]:
        sse = AsyncClient()
        await sse.aforce_login(gina)
        for name, path in streams(acme).items():
            response = await sse.get(path)
            assert response.status_code == 404, name
            assert ACME_MARK not in response.content.decode()
        ws = WebsocketCommunicator(JobEventsConsumer.as_asgi(), "/ws/jobs/")
        ws.scope["user"] = gina
        assert (await ws.connect())[0]
        replies = []
        for message in (
            {"subscribe": {"job": acme.failed.pk}},
            {"subscribe": {"pipeline": str(acme.ingest.pipeline_id)}},
            {"subscribe": {"jobs": [acme.failed.pk, acme.waiting.pk]}},
        ):
            await ws.send_json_to(message)
            replies.append(await ws.receive_json_from(5))
        await ws.disconnect()
        return replies

    async def bounded() -> list[Any]:
        try:
            return await asyncio.wait_for(main(), 20)
        finally:
            await get_hub().stop()

    replies = asyncio.run(bounded())
    assert replies[0] == {"error": f"job {acme.failed.pk} not found"}
    assert replies[1] == {"error": f"pipeline {acme.ingest.pipeline_id} not found"}
    assert replies[2] == {"subscribed": {"jobs": []}, "refused": [acme.failed.pk, acme.waiting.pk]}
