"""A job's payload names objects; it never vouches for them.

Globex's staff hold Acme's ids (a module, a report, a staged upload, a URL). Enqueued
through the API, every registered job type is refused or scoped to Globex; enqueued
behind the API's back as Globex's jobs, every CO2 handler still loads what it touches
through the job's tenant, so Acme's rows, figures and files stay as they were, and no
job's result or error carries them.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from factors import staging
from factors.models import CarbonReport, DataEntry, Emission, ReportModule, Unit, Upload
from jobs import engine, registry
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.support.base import granted, staff, tenant
from tests.support.factors.builders import csv_bytes, dispatch, module, plane_factors, plane_rows, report

pytestmark = pytest.mark.django_db

HEADER = ["quantity", "unit", "haul", "cabin"]


@pytest.fixture
def acme_world(clock) -> dict[str, Any]:
    """Acme's loaded travel module, and an upload of theirs still waiting for its job."""
    acme = tenant("Acme")
    plane_factors()
    the_report = report("ACME-LAB", tenant=acme)
    travel, energy = module(the_report, "travel"), module(the_report, "energy")
    dispatch(travel, csv_bytes(HEADER, plane_rows(30)))
    run_until_idle()
    _, waiting = staging.stage(
        io.BytesIO(csv_bytes(HEADER, plane_rows(5))), _entries_schema(), filename="acme.csv"
    )
    assert waiting is not None
    staging.register(waiting, Upload.Kind.ENTRIES, tenant_id=acme.pk)
    return {"tenant": acme, "report": the_report, "travel": travel, "energy": energy, "upload": waiting}


def _entries_schema() -> Any:
    from factors import csv_schemas

    return csv_schemas.entries("plane")


def snapshot(world: dict[str, Any]) -> tuple[Any, ...]:
    """Everything of Acme's a hostile job could change."""
    travel = ReportModule.objects.get(pk=world["travel"].pk)
    acme_report = CarbonReport.objects.get(pk=world["report"].pk)
    return (
        sorted(
            DataEntry.objects.filter(module__report__unit__tenant=world["tenant"]).values_list(
                "id", "quantity", "job_id"
            )
        ),
        sorted(Emission.objects.values_list("data_entry_id", "kg_co2e")),
        travel.stats,
        acme_report.stats,
        sorted(Unit.objects.values_list("code", "tenant_id", "parent_id")),
        Path(world["upload"].path).exists(),
        Upload.objects.filter(pk=world["upload"].id).exists(),
    )


def hostile_payload(world: dict[str, Any]) -> dict[str, Any]:
    """Every key any CO2 handler reads, filled with Acme's ids (and a path and a URL)."""
    return {
        "module": world["travel"].pk,
        "report": world["report"].pk,
        "data_entry_type": "plane",
        "year": 2024,
        "years": [2024],
        "source": "csv",
        "upload": world["upload"].id,
        "rows": 0,
        "url": "http://127.0.0.1:9/units.json",
        "path": world["upload"].path,
        "columns": ["quantity", "unit", "haul", "cabin"],
    }


def globex_staff() -> APIClient:
    client = APIClient()
    client.force_authenticate(granted(staff("gina", of=tenant("Globex")), "jobs.add_job"))
    return client


def test_every_job_type_enqueued_by_another_tenants_staff_with_acmes_ids_is_refused(acme_world):
    gina = globex_staff()
    before = snapshot(acme_world)

    answers = {
        name: gina.post("/api/jobs/", {"type": name, "payload": hostile_payload(acme_world)}, format="json")
        for name in registry.names()
    }

    assert {name: response.status_code for name, response in answers.items()} == {
        name: 400 for name in registry.names()
    }
    assert not Job.objects.filter(tenant__slug="globex").exists()
    run_until_idle()
    assert snapshot(acme_world) == before
    for response in answers.values():
        assert str(acme_world["travel"].stats.get("kg_co2e", "?")) not in response.content.decode()


@pytest.mark.parametrize(
    "name, payload",
    [
        ("factors.aggregation", lambda w: {"module": w["travel"].pk}),
        ("factors.emission_recalc", lambda w: {"data_entry_type": "plane", "module": w["travel"].pk}),
        ("factors.emission_recalc", lambda w: {"data_entry_type": "plane"}),
    ],
)
def test_the_open_job_types_do_not_find_another_tenants_module(acme_world, name, payload):
    gina = globex_staff()
    before = snapshot(acme_world)

    response = gina.post("/api/jobs/", {"type": name, "payload": payload(acme_world)}, format="json")

    assert response.status_code == 400
    assert "payload" in response.json()
    assert not Job.objects.filter(tenant__slug="globex").exists()
    assert snapshot(acme_world) == before


def test_an_open_job_type_works_for_the_callers_own_module(acme_world):
    alice = APIClient()
    alice.force_authenticate(granted(staff("alice", of=acme_world["tenant"]), "jobs.add_job"))

    response = alice.post(
        "/api/jobs/",
        {"type": "factors.aggregation", "payload": {"module": acme_world["travel"].pk}},
        format="json",
    )

    assert response.status_code == 201, response.json()
    run_until_idle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == Job.State.SUCCEEDED
    assert job.result["module"] == acme_world["travel"].pk


@pytest.mark.parametrize(
    "name",
    [
        "factors.csv_ingest",
        "factors.api_ingest",
        "factors.emission_recalc",
        "factors.aggregation",
        "factors.factor_ingest",
        "factors.unit_sync",
    ],
)
def test_a_handler_run_as_another_tenants_job_touches_nothing_of_acmes(acme_world, name):
    """Defence in depth: even a job written straight into the table (not through the
    API's validation) is bound to its own tenant by the handler."""
    globex = tenant("Globex")
    before = snapshot(acme_world)
    job = engine.enqueue(name, hostile_payload(acme_world), tenant=globex)

    run_until_idle()

    job.refresh_from_db()
    assert job.state in (Job.State.FAILED, Job.State.SUCCEEDED)
    assert snapshot(acme_world) == before
    shown = json.dumps(job.result) + job.last_error
    assert str(acme_world["travel"].stats["kg_co2e"]) not in shown
    assert acme_world["upload"].path not in shown


def test_a_payload_cannot_point_an_ingest_at_a_file_of_its_choosing(acme_world, tmp_path):
    victim = tmp_path / "victim.csv"
    victim.write_text("1,km,short,economy\n")
    upload = {
        "id": "0" * 32,
        "path": str(victim),
        "rows": 1,
        "columns": ["quantity", "unit", "haul", "cabin"],
    }
    job = engine.enqueue(
        "factors.csv_ingest",
        {"module": acme_world["travel"].pk, "data_entry_type": "plane", "upload": upload},
        tenant=acme_world["tenant"],
    )

    run_until_idle()

    job.refresh_from_db()
    assert (job.state, job.error_kind) == (Job.State.FAILED, Job.ErrorKind.PERMANENT)
    assert "is not an upload id" in job.last_error
    assert victim.exists()


def test_a_tenants_job_cannot_use_another_tenants_upload_even_for_its_own_module(acme_world):
    globex = tenant("Globex")
    theirs = module(report("GLOBEX-LAB", tenant=globex), "travel")
    job = engine.enqueue(
        "factors.csv_ingest",
        {"module": theirs.pk, "data_entry_type": "plane", "upload": acme_world["upload"].id},
        tenant=globex,
    )

    run_until_idle()

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert "not this job's to read" in job.last_error
    assert not DataEntry.objects.filter(module=theirs).exists()
    assert Path(acme_world["upload"].path).exists()
