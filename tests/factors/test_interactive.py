"""The interactive path: one entry at a time, stats adjusted inline, no job."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from factors import aggregation, stats
from factors.models import DataEntry, Emission
from jobs.models import Job
from tests.support.base import staff, tenant
from tests.support.factors.builders import module, plane_factors, report

pytestmark = pytest.mark.django_db

URL = "/v1/carbon_reports/{report}/modules/travel/data-entries"


@pytest.fixture
def acme():
    return tenant("Acme")


@pytest.fixture
def member(acme) -> APIClient:
    """A member of Acme who is not staff: members edit their own reports."""
    client = APIClient()
    client.force_login(staff("mia", of=acme, is_staff=False))
    return client


@pytest.fixture
def travel(acme):
    plane_factors()
    return module(report(tenant=acme))


def entries_url(travel, entry: int | None = None) -> str:
    url = URL.format(report=travel.report_id)
    return url if entry is None else f"{url}/{entry}"


def plane(quantity: str = "1000", haul: str = "short", cabin: str = "economy") -> dict:
    return {
        "data_entry_type": "plane",
        "quantity": quantity,
        "classification": {"haul": haul, "cabin": cabin},
    }


def recomputed(travel) -> dict:
    return stats.module_stats(aggregation.module_totals(travel.pk))


def test_adding_an_entry_prices_it_and_answers_with_the_new_stats(member, travel):
    response = member.post(entries_url(travel), plane("1000.5"), format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["entry"]["kg_co2e"] == "151.075500"  # 1000.5 km × 0.151
    assert body["entry"]["created_by"] == "mia"
    assert body["warnings"] == []
    assert body["module"]["stats"]["kg_co2e"] == "151.075500"
    assert body["module"]["recalculating"] is False
    assert body["report"]["stats"]["by_module"]["travel"]["entries"] == 1
    assert not Job.objects.exists()  # the interactive path runs no job
    travel.refresh_from_db()
    assert travel.stats == recomputed(travel)


def test_an_entry_without_factor_is_counted_and_reported_not_zeroed(member, travel):
    response = member.post(entries_url(travel), plane(haul="long", cabin="first"), format="json")

    body = response.json()
    assert body["entry"]["kg_co2e"] is None
    assert "no emission factor for plane 2024 (cabin=first, haul=long)" in body["warnings"][0]
    assert body["module"]["stats"]["without_factor"] == 1
    assert not Emission.objects.exists()


def test_editing_an_entry_moves_the_stats_by_the_difference(member, travel):
    created = member.post(entries_url(travel), plane("100"), format="json").json()["entry"]

    response = member.patch(
        entries_url(travel, created["id"]),
        {"quantity": "300", "classification": {"haul": "long", "cabin": "business"}},
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert response.json()["entry"]["kg_co2e"] == "88.800000"  # 300 × 0.296
    travel.refresh_from_db()
    assert travel.stats["kg_co2e"] == "88.800000"
    assert travel.stats == recomputed(travel)
    assert DataEntry.objects.get().updated_by.username == "mia"


def test_deleting_the_last_entry_brings_the_stats_back_to_empty(member, travel):
    created = member.post(entries_url(travel), plane(), format="json").json()["entry"]

    response = member.delete(entries_url(travel, created["id"]))

    assert response.status_code == 200
    assert response.json()["entry"] is None
    travel.refresh_from_db()
    travel.report.refresh_from_db()
    assert travel.stats == stats.empty_module_stats()
    assert travel.report.stats["kg_co2e"] == "0.000000"
    assert not DataEntry.objects.exists() and not Emission.objects.exists()


def test_incremental_stats_equal_a_full_recompute_after_many_edits(member, travel):
    rng = random.Random(7)
    ids: list[int] = []
    for _ in range(60):
        action = rng.choice(["add", "add", "edit", "delete"]) if ids else "add"
        body = plane(
            f"{rng.randint(0, 9999)}.{rng.randint(0, 999999):06d}",
            rng.choice(["short", "medium", "long"]),
            rng.choice(["economy", "business", "first"]),
        )
        if action == "add":
            ids.append(member.post(entries_url(travel), body, format="json").json()["entry"]["id"])
        elif action == "edit":
            member.patch(entries_url(travel, rng.choice(ids)), body, format="json")
        else:
            member.delete(entries_url(travel, ids.pop(rng.randrange(len(ids)))))

    travel.refresh_from_db()
    travel.report.refresh_from_db()
    assert travel.stats == recomputed(travel)
    assert travel.report.stats == stats.report_stats(
        travel.report.modules.values_list("module_type", "stats")
    )


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({**plane(), "quantity": "1,5"}, "quantity", "use a dot as the decimal separator"),
        ({**plane(), "quantity": "-3"}, "quantity", "starts with '-'"),
        ({**plane(), "quantity": "1.1234567"}, "quantity", "at most 6 decimals"),
        ({**plane(), "unit": "miles"}, "unit", "plane entries are in km"),
        (
            {**plane(), "data_entry_type": "electricity"},
            "data_entry_type",
            "electricity entries belong to the energy module",
        ),
        ({**plane(), "classification": {"haul": "short"}}, "classification", "missing key 'cabin'"),
        ({**plane(), "classification": {"haul": "=1+1", "cabin": "economy"}}, "classification", "formula"),
        ({**plane(), "colour": "red"}, "colour", "unknown field"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(member, travel, body, field, reason):
    response = member.post(entries_url(travel), body, format="json")

    assert response.status_code == 400
    assert reason in " ".join(response.json()[field])
    assert not DataEntry.objects.exists()
    travel.refresh_from_db()
    assert travel.stats == stats.empty_module_stats()


def test_another_tenants_report_is_not_found(travel):
    outsider = APIClient()
    outsider.force_login(staff("gus", of=tenant("Globex"), is_staff=False))

    assert outsider.post(entries_url(travel), plane(), format="json").status_code == 404
    assert outsider.get(f"/v1/carbon_reports/{travel.report_id}").status_code == 404


def test_an_edit_costs_the_same_few_queries_whatever_the_report_size(
    member, travel, django_assert_max_num_queries
):
    now = travel.report.created_at
    DataEntry.objects.bulk_create(
        DataEntry(
            module=travel,
            data_entry_type="plane",
            year=2024,
            quantity=Decimal(i),
            unit="km",
            classification={"haul": "short", "cabin": "economy"},
            source="manual",
            created_at=now,
            updated_at=now,
        )
        for i in range(2000)
    )
    aggregation.recompute_module(travel.pk)

    with django_assert_max_num_queries(16):  # session, user, module, report, entry, stats …
        response = member.post(entries_url(travel), plane(), format="json")

    assert response.status_code == 201
    travel.refresh_from_db()
    assert travel.stats == recomputed(travel)
