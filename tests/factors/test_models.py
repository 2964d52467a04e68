"""The invariants the database keeps: one factor per key whatever the key order, the
foreign keys checked per statement (migration 0002), and the check constraints."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from factors.models import DataEntry, Emission, EmissionFactor
from jobs import clock
from jobs.notify import raw_connection
from tests.support.factors.builders import factor, module, report

pytestmark = pytest.mark.django_db


def sql(statement: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])


def entry(mod, **fields) -> DataEntry:
    now = clock.now()
    values = {
        "module": mod,
        "data_entry_type": "plane",
        "year": 2024,
        "quantity": "10",
        "unit": "km",
        "classification": {"haul": "short", "cabin": "economy"},
        "source": "manual",
        "created_at": now,
        "updated_at": now,
        **fields,
    }
    return DataEntry.objects.create(**values)


def test_a_factor_key_in_another_order_is_the_same_key():
    factor("plane", 2024, {"haul": "short", "cabin": "economy"}, "0.1")
    with pytest.raises(IntegrityError, match="factors_factor_one_per_key"):
        factor("plane", 2024, {"cabin": "economy", "haul": "short"}, "0.2")


def test_an_entry_must_name_an_existing_module():
    travel = module(report())
    with pytest.raises(IntegrityError, match="factors_reportmodule missing"), transaction.atomic():
        sql(
            "INSERT INTO factors_dataentry (module_id, data_entry_type, year, quantity, unit, "
            "classification, source, created_at, updated_at) VALUES (%s, 'plane', 2024, 1, 'km', "
            "'{}', 'manual', now(), now())",
            [travel.pk + 1000],
        )
    with pytest.raises(IntegrityError), transaction.atomic():
        DataEntry.objects.filter(pk=entry(travel).pk).update(module_id=travel.pk + 1000)


def test_an_emission_must_name_an_existing_entry_and_factor():
    travel = module(report())
    used = factor("plane", 2024, {"haul": "short", "cabin": "economy"}, "0.1")
    row = entry(travel)
    with pytest.raises(IntegrityError, match="factors_dataentry missing"), transaction.atomic():
        Emission.objects.create(data_entry_id=row.pk + 1, factor=used, kg_co2e=1, computed_at=clock.now())
    with pytest.raises(IntegrityError, match="factors_emissionfactor missing"), transaction.atomic():
        Emission.objects.create(data_entry=row, factor_id=used.pk + 1, kg_co2e=1, computed_at=clock.now())


def test_deleting_an_entry_deletes_its_emission_and_a_used_factor_or_module_stays():
    travel = module(report())
    used = factor("plane", 2024, {"haul": "short", "cabin": "economy"}, "0.1")
    row = entry(travel)
    Emission.objects.create(data_entry=row, factor=used, kg_co2e=1, computed_at=clock.now())

    with pytest.raises(IntegrityError, match="used by emissions"), transaction.atomic():
        sql("DELETE FROM factors_emissionfactor WHERE id = %s", [used.pk])
    with pytest.raises(IntegrityError, match="still has data entries"), transaction.atomic():
        sql("DELETE FROM factors_reportmodule WHERE id = %s", [travel.pk])
    sql("DELETE FROM factors_dataentry WHERE id = %s", [row.pk])

    assert not Emission.objects.exists()
    sql("DELETE FROM factors_emissionfactor WHERE id = %s", [used.pk])  # unused now


@pytest.mark.django_db(transaction=True)
def test_entries_inserted_while_their_module_is_deleted_fail_instead_of_dangling():
    travel = module(report())
    deleter, inserter = raw_connection(), raw_connection()
    deleter.execute("BEGIN")
    deleter.execute("DELETE FROM factors_reportmodule WHERE id = %s", [travel.pk])
    outcome: list[BaseException | None] = []

    def insert() -> None:
        try:
            inserter.execute(
                "INSERT INTO factors_dataentry (module_id, data_entry_type, year, quantity, unit, "
                "classification, source, created_at, updated_at) VALUES (%s, 'plane', 2024, 1, "
                "'km', '{}', 'manual', now(), now())",
                [travel.pk],
            )
            outcome.append(None)
        except psycopg.Error as exc:
            outcome.append(exc)

    thread = threading.Thread(target=insert)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # waiting for the module's lock, as a foreign key check would
    deleter.execute("COMMIT")
    thread.join(10)
    deleter.close()
    inserter.close()

    assert isinstance(outcome[0], psycopg.errors.ForeignKeyViolation)
    assert not DataEntry.objects.exists()


def _scans(table: str) -> tuple[int, int]:
    """Sequential and index scans of ``table`` so far in this transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = %s", [table]
        )
        return cursor.fetchone()


def test_a_cascade_planned_for_a_bulk_delete_still_finds_one_emission_by_index():
    """Trigger functions keep their plans for the connection's life (migration 0003): the
    cascade first planned for a bulk DELETE, while no emission existed, must not make a
    later one-entry DELETE read every emission."""
    travel = module(report())
    used = factor("plane", 2024, {"haul": "short", "cabin": "economy"}, "0.1")
    now = clock.now()
    DataEntry.objects.bulk_create(
        DataEntry(
            module=travel,
            data_entry_type="plane",
            year=2024,
            quantity=1,
            unit="km",
            classification={"haul": "short", "cabin": "economy"},
            source="manual",
            created_at=now,
            updated_at=now,
        )
        for _ in range(2000)
    )
    sql("DELETE FROM factors_dataentry WHERE module_id = %s", [travel.pk])
    row = entry(travel)
    Emission.objects.create(data_entry=row, factor=used, kg_co2e=1, computed_at=now)
    seq_before, idx_before = _scans("factors_emission")

    sql("DELETE FROM factors_dataentry WHERE id = %s", [row.pk])

    seq_after, idx_after = _scans("factors_emission")
    assert (seq_after - seq_before, idx_after - idx_before) == (0, 1)
    assert not Emission.objects.exists()


def _index_scans(index: str) -> int:
    """Scans of ``index`` so far in this transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_xact_numscans(%s::regclass)", [index])
        return cursor.fetchone()[0]


def test_the_id_lookup_of_the_references_never_uses_the_module_index():
    """Statistics that say the entries table is empty price every index scan at nothing;
    the emissions' reference check (``id = ANY(…)``) must still go by primary key, not
    scan the module index once per id (migration 0005)."""
    travel = module(report())
    used = factor("plane", 2024, {"haul": "short", "cabin": "economy"}, "0.1")
    rows = [entry(travel) for _ in range(3)]
    sql(
        "UPDATE pg_class SET reltuples = 0, relpages = greatest(relpages, 10) WHERE relname IN "
        "('factors_dataentry', 'factors_dataentry_pkey', 'factors_entry_module_type_idx')"
    )
    before = _index_scans("factors_entry_module_type_idx"), _index_scans("factors_dataentry_pkey")

    Emission.objects.bulk_create(
        Emission(data_entry=row, factor=used, kg_co2e=1, computed_at=clock.now()) for row in rows
    )

    after = _index_scans("factors_entry_module_type_idx"), _index_scans("factors_dataentry_pkey")
    assert after[0] == before[0] and after[1] > before[1]


def test_a_module_with_entries_still_cannot_be_deleted_and_the_guard_uses_the_index():
    travel = module(report())
    entry(travel)
    before = _index_scans("factors_entry_module_type_idx")
    with pytest.raises(IntegrityError, match="still has data entries"), transaction.atomic():
        sql("DELETE FROM factors_reportmodule WHERE id = %s", [travel.pk])
    assert _index_scans("factors_entry_module_type_idx") > before


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        ({"quantity": "-1"}, "factors_entry_quantity_nonnegative"),
        ({"source": "csv"}, "factors_entry_provenance"),
        ({"classification": ["short"]}, "factors_entry_classification_is_object"),
        ({"year": 1999}, "factors_entry_year_in_range"),
    ],
)
def test_check_constraints_refuse_impossible_entries(fields, constraint):
    travel = module(report())
    with pytest.raises(IntegrityError, match=constraint):
        entry(travel, **fields)


def test_stale_factors_are_a_queryset_of_their_own():
    factor("plane", 2024, {"haul": "short", "cabin": "economy"}, "0.1")
    EmissionFactor.objects.update(is_stale=True)
    assert EmissionFactor.objects.stale().count() == 1
