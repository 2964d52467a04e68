"""Bulk pipelines and interactive edits at the same time, with real concurrent
connections: one pipeline per combination, and stats right in the end."""

from __future__ import annotations

import csv
import io
import threading
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from rest_framework.test import APIClient

from factors import aggregation, stats
from factors.models import DataEntry, Emission, ReportModule
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.support.base import granted, staff, tenant
from tests.support.factors.builders import (
    PLANE_FACTORS,
    csv_bytes,
    expected_totals,
    factor,
    module,
    plane_factors,
    plane_rows,
    report,
)

HEADER = ["quantity", "unit", "haul", "cabin"]
FAST = {"JOBS_LEASE_SECONDS": "2", "JOBS_HEARTBEAT_SECONDS": "0.5", "JOBS_REAPER_SECONDS": "0.5"}


def client_of(username: str, acme) -> APIClient:
    client = APIClient()
    client.force_login(granted(staff(username, of=acme), "factors.operate_dataentry"))
    return client


def post_upload(client: APIClient, mod: ReportModule, body: bytes, data_entry_type: str = "plane"):
    return client.post(
        "/sync/dispatch",
        {
            "report": mod.report_id,
            "module": mod.module_type,
            "data_entry_type": data_entry_type,
            "file": SimpleUploadedFile("entries.csv", body),
        },
        format="multipart",
    )


@pytest.mark.django_db(transaction=True)
def test_two_uploads_for_one_combination_at_the_same_moment_run_one_pipeline(clock):
    acme = tenant("Acme")
    plane_factors()
    travel = module(report(tenant=acme))
    clients = [client_of("alice", acme), client_of("bob", acme)]
    bodies = [csv_bytes(HEADER, plane_rows(3000)), csv_bytes(HEADER, plane_rows(3000, start=9))]
    gate, answers = threading.Barrier(2), [None, None]

    def send(n: int) -> None:
        try:
            gate.wait()
            answers[n] = post_upload(clients[n], travel, bodies[n])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(a.status_code for a in answers) == [202, 409]
    winner = next(n for n in range(2) if answers[n].status_code == 202)
    assert answers[1 - winner].json()["job"] == answers[winner].json()["job"]
    run_until_idle()
    assert Job.objects.filter(type="factors.csv_ingest").count() == 1
    assert DataEntry.objects.count() == 3000
    assert DataEntry.objects.values("row_number").distinct().count() == 3000
    travel.refresh_from_db()
    expected = expected_totals(csv_rows(bodies[winner]))
    assert (travel.stats["entries"], travel.stats["kg_co2e"]) == (expected[0], stats.amount(expected[2]))


def csv_rows(body: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(body.decode())))[1:]


ELECTRICITY = {"fr": "0.052", "de": "0.381"}


def electricity_rows(n: int) -> list[list[str]]:
    return [[f"{100 + i % 900}.5", "kwh", ["fr", "de", "ch"][i % 3]] for i in range(n)]


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_pipelines_on_two_modules_of_one_report_and_edits_meanwhile_end_with_right_stats(processes):
    acme = tenant("Acme")
    plane_factors()
    for country, value in ELECTRICITY.items():
        factor("electricity", 2024, {"country": country}, value)
    the_report = report(tenant=acme)
    travel, energy = module(the_report, "travel"), module(the_report, "energy")
    alice = client_of("alice", acme)
    plane = plane_rows(40_000)
    power = electricity_rows(30_000)
    assert post_upload(alice, travel, csv_bytes(HEADER, plane)).status_code == 202
    assert (
        post_upload(
            alice, energy, csv_bytes(["quantity", "unit", "country"], power), "electricity"
        ).status_code
        == 202
    )

    worker = processes.manage("worker", "jobs_worker", "--concurrency", "2", env=processes.env(**FAST))
    manual = edit_until_done(alice, travel, energy, worker)

    travel.refresh_from_db()
    energy.refresh_from_db()
    travel.report.refresh_from_db()
    for mod in (travel, energy):
        assert mod.stats == stats.module_stats(aggregation.module_totals(mod.pk))
    assert travel.report.stats == stats.report_stats(
        ReportModule.objects.filter(report=the_report).values_list("module_type", "stats")
    )
    count, quantity, kg, missing = expected_totals(plane + manual, PLANE_FACTORS)
    assert (travel.stats["entries"], travel.stats["kg_co2e"], travel.stats["without_factor"]) == (
        count,
        stats.amount(kg),
        missing,
    )
    kwh = sum(
        (Decimal(q) * Decimal(ELECTRICITY[c])).quantize(Decimal("0.000001"))
        for q, _, c in power
        if c in ELECTRICITY
    )
    assert (energy.stats["entries"], energy.stats["kg_co2e"]) == (30_000, stats.amount(kwh))
    assert (
        Emission.objects.count()
        == DataEntry.objects.count() - travel.stats["without_factor"] - energy.stats["without_factor"]
    )


def edit_until_done(alice: APIClient, travel: ReportModule, energy: ReportModule, worker) -> list[list[str]]:
    """Add and delete manual entries on both modules while the pipelines run; returns the
    manual plane entries that remain (as CSV-like rows)."""
    url = "/v1/carbon_reports/{r}/modules/{m}/data-entries"
    kept: list[list[str]] = []
    edits = during_jobs = 0
    while Job.objects.filter(state__in=Job.UNFINISHED).exists() or edits < 20:
        assert not worker.exited(), worker.tail()
        edits += 1
        during_jobs += Job.objects.filter(state=Job.State.RUNNING).exists()
        body = {
            "data_entry_type": "plane",
            "quantity": f"{edits}.25",
            "classification": {"haul": "medium", "cabin": "economy"},
        }
        created = alice.post(url.format(r=travel.report_id, m="travel"), body, format="json")
        assert created.status_code == 201, created.json()
        if edits % 3 == 0:
            alice.delete(url.format(r=travel.report_id, m="travel") + f"/{created.json()['entry']['id']}")
        else:
            kept.append([f"{edits}.25", "km", "medium", "economy"])
        power = alice.post(
            url.format(r=energy.report_id, m="energy"),
            {"data_entry_type": "electricity", "quantity": "1", "classification": {"country": "fr"}},
            format="json",
        )
        alice.delete(url.format(r=energy.report_id, m="energy") + f"/{power.json()['entry']['id']}")
        assert edits < 5000, "the pipelines did not finish"
    assert during_jobs > 0, "no edit happened while a bulk job was running"
    return kept
