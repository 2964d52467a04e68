"""The factors' read API: a cursor page and a detail, filtered by type, year and stale;
shared reference data that members of every tenant read and a user of no tenant does not;
a bad filter is a 400 naming it, never a 500 nor a silently unfiltered list."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from factors.models import EmissionFactor
from tests.support.base import as_user, staff, tenant
from tests.support.factors.builders import factor, plane_factors

pytestmark = pytest.mark.django_db

FACTORS = "/v1/emission_factors"


@pytest.fixture
def member() -> APIClient:
    return as_user(staff("bob", of=tenant("Acme"), is_staff=False))


@pytest.fixture
def factors() -> None:
    plane_factors(2023)
    plane_factors(2024)
    factor("train", 2024, {"network": "urban"}, "0.004")
    EmissionFactor.objects.filter(year=2023, classification__haul="long").update(is_stale=True)


def ids(response) -> list[int]:
    assert response.status_code == 200, response.json()
    return [row["id"] for row in response.json()["results"]]


def test_members_list_every_factor_in_id_order_a_page_at_a_time(member, factors):
    every = list(EmissionFactor.objects.order_by("id").values_list("id", flat=True))

    first = member.get(FACTORS, {"page_size": 10}).json()
    second = member.get(first["next"]).json()

    assert [row["id"] for row in first["results"] + second["results"]] == every
    assert second["next"] is None
    row = first["results"][0]
    assert set(row) == {
        "id",
        "data_entry_type",
        "year",
        "classification",
        "value",
        "unit",
        "source",
        "stale",
        "created_at",
        "updated_at",
    }


def test_filters_by_type_year_and_stale(member, factors):
    def matching(**lookup) -> list[int]:
        return list(EmissionFactor.objects.filter(**lookup).order_by("id").values_list("id", flat=True))

    assert ids(member.get(FACTORS, {"type": "train"})) == matching(data_entry_type="train")
    assert ids(member.get(FACTORS, {"year": "2023"})) == matching(year=2023)
    assert ids(member.get(FACTORS, {"stale": "true"})) == matching(is_stale=True)
    assert ids(member.get(FACTORS, {"stale": "false", "type": "plane", "year": 2023})) == matching(
        is_stale=False, data_entry_type="plane", year=2023
    )
    assert len(matching(is_stale=True)) == 2


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"type": "rocket"}, "type"),
        ({"year": "2024.5"}, "year"),
        ({"year": "1999"}, "year"),
        ({"year": "9" * 30}, "year"),
        ({"year": "\x00"}, "year"),
        ({"stale": "maybe"}, "stale"),
        ({"stale": "yes"}, "stale"),
        ({"stal": "true"}, "stal"),
        ({"cursor": "garbage"}, "cursor"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(member, factors, params, named):
    response = member.get(FACTORS, params)

    assert response.status_code == 400
    assert list(response.json()) == [named]


def test_the_detail_answers_one_factor_and_404_for_an_unknown_id(member, factors):
    one = EmissionFactor.objects.get(data_entry_type="train")

    found = member.get(f"{FACTORS}/{one.pk}")

    assert found.status_code == 200
    assert found.json() | {"created_at": None, "updated_at": None} == {
        "id": one.pk,
        "data_entry_type": "train",
        "year": 2024,
        "classification": {"network": "urban"},
        "value": "0.004000000",
        "unit": "km",
        "source": "test",
        "stale": False,
        "created_at": None,
        "updated_at": None,
    }
    assert member.get(f"{FACTORS}/{one.pk + 1000}").status_code == 404


def test_a_user_of_no_tenant_reads_no_factor_and_anonymous_callers_are_refused(factors):
    loner = as_user(User.objects.create_user("loner", password="x"))
    one = EmissionFactor.objects.first()

    assert loner.get(FACTORS).json()["results"] == []
    assert loner.get(f"{FACTORS}/{one.pk}").status_code == 404
    assert APIClient().get(FACTORS).status_code == 401
    assert APIClient().get(f"{FACTORS}/{one.pk}").status_code == 401


def test_the_schema_documents_both_operations_with_their_filters():
    schema = SchemaGenerator().get_schema(request=None, public=True)

    listing = schema["paths"]["/v1/emission_factors"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"type", "year", "stale", "cursor"}
    assert "/v1/emission_factors/{id}" in schema["paths"]
    assert "400" in listing["responses"]
