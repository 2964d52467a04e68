"""Every dataset runs against the live schema with the columns and types it declares, so
a renamed or retyped column in another app fails here rather than in an export."""

from __future__ import annotations

import pytest
from django.db import connection

from exports.datasets import DATASETS
from tests.support.base import tenant

pytestmark = pytest.mark.django_db

# PostgreSQL's type of each column as declared (json is exported as its text).
DECLARED_AS = {
    "bigint": {"int8"},
    "integer": {"int4", "int2"},
    "varchar": {"varchar", "text"},
    "json": {"text"},
    "boolean": {"bool"},
    "double": {"float8"},
    "date": {"date"},
    "timestamp(6) with time zone": {"timestamptz"},
}


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_a_dataset_selects_what_it_declares(name):
    dataset = DATASETS[name]
    names = [column.name for column in dataset.columns]
    with connection.cursor() as cursor:
        cursor.execute(dataset.sql(tenant().pk, list(reversed(names))) + " LIMIT 0")
        found = [
            (column.name, column.type_code, column.precision, column.scale) for column in cursor.description
        ]
        cursor.execute(
            "SELECT oid, typname FROM pg_type WHERE oid = ANY(%s)", [[code for _, code, _, _ in found]]
        )
        type_names = dict(cursor.fetchall())
    assert [name for name, *_ in found] == list(reversed(names))
    for (column_name, code, precision, scale), column in zip(found, reversed(dataset.columns), strict=True):
        if column.type.startswith("decimal("):
            assert type_names[code] == "numeric", column_name
            assert column.type == f"decimal({precision},{scale})", column_name
        else:
            assert type_names[code] in DECLARED_AS[column.type], (name, column_name, type_names[code])


def test_a_tenant_id_is_an_integer_and_columns_are_known():
    dataset = DATASETS["units"]
    with pytest.raises(TypeError):
        dataset.sql("1 OR 1=1", ["id"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no column 'secret'"):
        dataset.sql(1, ["id", "secret"])
