"""The bulk path end to end: upload → csv_ingest → emission_recalc → aggregation."""

from __future__ import annotations

from decimal import Decimal

import pytest

import jobs
from factors import emissions, services
from factors.models import DataEntry, Emission
from factors.stats import amount
from jobs.models import Job
from jobs.worker import run_until_idle
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


def test_an_upload_ends_in_stats_equal_to_totals_computed_independently(clock):
    plane_factors(skip=[("long", "business")])
    known = {key: value for key, value in PLANE_FACTORS.items() if key != ("long", "business")}
    travel = module(report())
    rows = plane_rows(12_345)
    started = dispatch(travel, csv_bytes(HEADER, rows))

    run_until_idle()

    jobs = list(Job.objects.filter(pipeline_id=started.pipeline_id).order_by("id"))
    assert [(j.type, j.state) for j in jobs] == [
        ("factors.csv_ingest", "succeeded"),
        ("factors.emission_recalc", "succeeded"),
        ("factors.aggregation", "succeeded"),
    ]
    count, quantity, kg, missing = expected_totals(rows, known)
    travel.refresh_from_db()
    assert travel.stats == {
        "entries": count,
        "kg_co2e": amount(kg),
        "without_factor": missing,
        "by_type": {
            "plane": {
                "entries": count,
                "quantity": amount(quantity),
                "unit": "km",
                "kg_co2e": amount(kg),
                "without_factor": missing,
            }
        },
    }
    travel.report.refresh_from_db()
    assert travel.report.stats["kg_co2e"] == amount(kg)
    assert travel.report.stats["by_module"]["travel"]["entries"] == count
    assert DataEntry.objects.filter(module=travel).count() == count
    assert Emission.objects.count() == count - missing
    assert missing > 0 and kg > Decimal(0)


def test_recalculations_of_one_module_waiting_together_make_one_aggregation(clock):
    plane_factors()
    travel = module(report())
    dispatch(travel, csv_bytes(HEADER, plane_rows(30)))
    run_until_idle()
    for data_entry_type in ("plane", "train", "car"):
        scope = emissions.Scope(data_entry_type, module_id=travel.pk)
        jobs.enqueue(
            "factors.emission_recalc",
            scope.payload(),
            concurrency_key=services.recalc_key(data_entry_type, travel.pk),
        )

    run_until_idle()

    recalcs = Job.objects.filter(type="factors.emission_recalc", state="succeeded")
    aggregations = Job.objects.filter(type="factors.aggregation", state="succeeded")
    assert (recalcs.count(), aggregations.count()) == (4, 2)  # the upload's, and one for the three


def test_entries_without_a_factor_are_listed_in_the_recalculation_result(clock):
    plane_factors(skip=[("short", "economy")])
    travel = module(report())
    started = dispatch(
        travel,
        csv_bytes(
            HEADER,
            [
                ["10", "km", "short", "economy"],
                ["20", "km", "Short", "ECONOMY"],
                ["30", "km", "long", "business"],
            ],
        ),
    )
    run_until_idle()

    recalc = Job.objects.get(pipeline_id=started.pipeline_id, type="factors.emission_recalc")
    assert recalc.result["without_factor"] == 2
    assert recalc.result["missing_factors"] == [
        {"key": '2024 {"cabin": "economy", "haul": "short"}', "entries": 2}
    ]
