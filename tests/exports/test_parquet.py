"""Parquet files of an export: the type mapping, streaming writes that appear whole or not
at all, and folders counted from their footers, on local disk and on an S3 endpoint."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import given
from hypothesis import strategies as st

from exports import parquet
from exports.spec import Column

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(12, 4))])

# (how Trino names the type, the Arrow type) for types without parameters.
SIMPLE = [
    ("bigint", pa.int64()),
    ("integer", pa.int32()),
    ("smallint", pa.int16()),
    ("tinyint", pa.int8()),
    ("double", pa.float64()),
    ("real", pa.float32()),
    ("boolean", pa.bool_()),
    ("varchar", pa.string()),
    ("date", pa.date32()),
    ("json", pa.string()),
    ("uuid", pa.string()),
    ("varbinary", pa.binary()),
    ("timestamp", pa.timestamp("us")),
    ("timestamp with time zone", pa.timestamp("us", tz="UTC")),
]


def batch(ids: range, schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(list(ids), pa.int64()),
            pa.array([f'name, "{i}"\n' for i in ids]),
            pa.array([Decimal(i) / 10000 for i in ids], pa.decimal128(12, 4)),
        ],
        schema=schema,
    )


def batches(count: int, size: int = 1000) -> Iterator[pa.RecordBatch]:
    for start in range(0, count * size, size):
        yield batch(range(start, start + size))


def spaced(name: str, draw_case: list[bool], padding: str) -> str:
    """``name`` in mixed case with extra blanks around its words, parentheses and commas."""
    cased = "".join(
        char.upper() if upper else char
        for char, upper in zip(name, draw_case + [False] * len(name), strict=False)
    )
    for mark in ("(", ",", ")"):
        cased = cased.replace(mark, f"{padding}{mark}{padding}")
    return padding + cased.replace(" ", f" {padding}") + padding


@st.composite
def valid_types(draw: st.DrawFn) -> tuple[str, pa.DataType]:
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    length = draw(st.integers(1, 2**31 - 1))
    time_precision = draw(st.integers(0, 12))
    name, expected = draw(
        st.sampled_from(
            SIMPLE
            + [
                (f"decimal({precision},{scale})", pa.decimal128(precision, scale)),
                (f"varchar({length})", pa.string()),
                (f"char({length})", pa.string()),
                (f"timestamp({time_precision})", pa.timestamp("us")),
                (f"timestamp({time_precision}) with time zone", pa.timestamp("us", tz="UTC")),
            ]
        )
    )
    case = draw(st.lists(st.booleans(), max_size=len(name)))
    padding = draw(st.sampled_from(["", " ", "  ", "\t"]))
    return spaced(name, case, padding), expected


@given(valid_types())
def test_a_trino_type_maps_to_its_arrow_type_in_any_case_and_spacing(case):
    name, expected = case
    assert parquet.arrow_type(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "time",
        "time(3)",
        "interval day to second",
        "array(bigint)",
        "map(varchar,bigint)",
        "row(a bigint)",
        "ipaddress",
        "decimal(39,2)",
        "decimal(0,0)",
        "decimal(5,6)",
        "timestamp(13)",
        "varchar(",
        "varchar(n)",
        "bigint unsigned",
        "timestamp with local time zone",
        "text",
        "",
    ],
)
def test_an_unknown_type_is_refused_by_name(name):
    with pytest.raises(parquet.UnsupportedType, match=re.escape(repr(name))):
        parquet.arrow_type(name)


@given(st.text(alphabet="abcdeimnrtz(), 0123456789", max_size=30))
def test_any_text_maps_to_a_type_or_is_refused_as_unsupported(name):
    try:
        assert isinstance(parquet.arrow_type(name), pa.DataType)
    except parquet.UnsupportedType as error:
        assert error.trino_type == name
        assert isinstance(error, ValueError)


def test_a_schema_keeps_the_columns_order_and_declared_types():
    schema = parquet.arrow_schema(
        [Column("z", "varchar(3)"), Column("a", "decimal(12,4)"), Column("m", "timestamp(6) with time zone")]
    )
    assert schema.names == ["z", "a", "m"]
    assert schema.types == [pa.string(), pa.decimal128(12, 4), pa.timestamp("us", tz="UTC")]
    assert schema.field("a").metadata == {b"trino_type": b"decimal(12,4)"}


def test_batches_round_trip_through_one_file(tmp_path):
    written = parquet.write_batches(batches(5), SCHEMA, str(tmp_path / "out"), "part-g1.parquet")

    path = tmp_path / "out" / "part-g1.parquet"
    assert written == parquet.Written(5000, path.stat().st_size, [str(path)])
    table = pq.read_table(path)
    assert table.schema.names == ["id", "name", "amount"]
    assert table.column("id").to_pylist() == list(range(5000))
    assert table.slice(4999).to_pylist() == [
        {"id": 4999, "name": 'name, "4999"\n', "amount": Decimal("0.4999")}
    ]


def test_small_batches_are_gathered_into_whole_row_groups(tmp_path):
    parquet.write_batches(batches(100), SCHEMA, str(tmp_path), "f.parquet", row_group_rows=30_000)

    metadata = pq.read_metadata(tmp_path / "f.parquet")
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [
        30_000,
        30_000,
        30_000,
        10_000,
    ]


def test_a_batch_is_cast_to_the_file_schema(tmp_path):
    narrow = pa.record_batch(
        [pa.array([1, 2], pa.int32()), pa.array(["a", None]), pa.array([1, 2], pa.int8())], names=SCHEMA.names
    )

    parquet.write_batches([narrow], SCHEMA, str(tmp_path), "f.parquet")

    table = pq.read_table(tmp_path / "f.parquet")
    assert table.schema.types == SCHEMA.types
    assert table.to_pylist()[1] == {"id": 2, "name": None, "amount": Decimal("2.0000")}


def test_a_batch_with_other_columns_is_refused_and_leaves_no_file(tmp_path):
    swapped = pa.record_batch(
        [pa.array(["a"]), pa.array([1], pa.int64()), pa.array([Decimal(1)], pa.decimal128(12, 4))],
        names=["name", "id", "amount"],
    )

    with pytest.raises(ValueError, match=r"columns \['name', 'id', 'amount'\]"):
        parquet.write_batches([batch(range(3)), swapped], SCHEMA, str(tmp_path), "f.parquet")
    assert list(tmp_path.iterdir()) == []


def test_no_batches_still_write_a_file_with_the_schema(tmp_path):
    written = parquet.write_batches(iter([]), SCHEMA, str(tmp_path / "empty"), "f.parquet")

    assert written.rows == 0
    table = pq.read_table(written.files[0])
    assert table.num_rows == 0
    assert table.schema.equals(SCHEMA)


def test_a_file_is_written_under_a_hidden_name_and_renamed_when_complete(tmp_path):
    seen_while_writing = []

    def watched() -> Iterator[pa.RecordBatch]:
        yield from batches(3)
        seen_while_writing.extend(path.name for path in tmp_path.iterdir())

    parquet.write_batches(watched(), SCHEMA, str(tmp_path), "f.parquet")

    assert len(seen_while_writing) == 1 and seen_while_writing[0].startswith(".f.parquet.")
    assert [path.name for path in tmp_path.iterdir()] == ["f.parquet"]


def test_a_failure_midway_leaves_no_partial_file_and_removes_the_temporary(tmp_path):
    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(3)
        raise RuntimeError("the query broke")

    with pytest.raises(RuntimeError, match="the query broke"):
        parquet.write_batches(failing(), SCHEMA, str(tmp_path), "f.parquet", row_group_rows=1000)

    assert list(tmp_path.iterdir()) == []


def test_a_failed_rewrite_keeps_the_complete_file_already_there(tmp_path):
    parquet.write_batches(batches(2), SCHEMA, str(tmp_path), "f.parquet")

    def failing() -> Iterator[pa.RecordBatch]:
        yield batch(range(10))
        raise RuntimeError("the query broke")

    with pytest.raises(RuntimeError):
        parquet.write_batches(failing(), SCHEMA, str(tmp_path), "f.parquet")
    assert pq.read_metadata(tmp_path / "f.parquet").num_rows == 2000
    assert [path.name for path in tmp_path.iterdir()] == ["f.parquet"]


def write_folder(folder) -> None:
    """Three export files (one in a subfolder) and what is not part of an export."""
    parquet.write_batches(batches(2), SCHEMA, str(folder), "part-g1.parquet")
    parquet.write_batches(batches(3), SCHEMA, str(folder), "part-g2.parquet")
    parquet.write_batches(batches(1, 10), SCHEMA, str(folder / "g3"), "0001.parquet")
    parquet.write_batches(batches(1), SCHEMA, str(folder), ".part-g4.parquet.tmp.parquet")
    parquet.write_batches(batches(1), SCHEMA, str(folder / "_temporary"), "0002.parquet")
    parquet.write_batches(batches(1), SCHEMA, str(folder / ".staging"), "0003.parquet")
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / "notes.txt").write_text("not parquet")


def test_a_folder_counts_its_rows_from_the_footers(tmp_path):
    write_folder(tmp_path)

    counted = parquet.count_rows(str(tmp_path))

    expected = [tmp_path / "g3" / "0001.parquet", tmp_path / "part-g1.parquet", tmp_path / "part-g2.parquet"]
    assert counted == parquet.Written(
        5010, sum(path.stat().st_size for path in expected), [str(path) for path in expected]
    )


def test_a_missing_folder_counts_nothing(tmp_path):
    assert parquet.count_rows(str(tmp_path / "nowhere")) == parquet.Written(0, 0, [])


def test_removing_files_keeps_only_those_named(tmp_path):
    write_folder(tmp_path)
    keep = str(tmp_path / "part-g2.parquet")

    removed = parquet.remove_files(str(tmp_path), [keep])

    assert keep not in removed and str(tmp_path / "g3" / "0001.parquet") in removed
    assert len(removed) == 7
    assert [path.name for path in tmp_path.iterdir()] == ["part-g2.parquet"]


def test_removing_files_from_a_missing_folder_is_not_an_error(tmp_path):
    assert parquet.remove_files(str(tmp_path / "nowhere")) == []


def test_a_destination_url_names_its_filesystem_and_path():
    fs, path = parquet.open_destination("memory://bucket/snapshots/7/")
    assert isinstance(fs, MemoryFileSystem)
    assert path == "/bucket/snapshots/7"


def test_files_round_trip_through_s3(s3_options):
    fs, _ = parquet.open_destination("s3://exports", s3_options)
    folder = "s3://exports/snapshots/7/entries"
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
    moments = [dt.datetime(2026, 11, 2, 9, 0, i, tzinfo=dt.UTC) for i in range(3)]
    rows = pa.record_batch(
        [pa.array([1, 2, 3], pa.int64()), pa.array(moments, schema.field("at").type)], schema=schema
    )

    first = parquet.write_batches([rows], schema, folder, "part-g1.parquet", s3_options)
    second = parquet.write_batches([rows, rows], schema, f"{folder}/g2", "0001.parquet", s3_options)

    assert first.files == [f"{folder}/part-g1.parquet"]
    assert second.files == [f"{folder}/g2/0001.parquet"]
    assert parquet.count_rows(folder, s3_options) == parquet.Written(
        9, first.size + second.size, second.files + first.files
    )
    with fs.open(second.files[0], "rb") as source:
        assert pq.read_table(source).column("at").to_pylist() == moments * 2
    assert [path for path in fs.find("exports") if "/." in path] == []
    assert parquet.remove_files(folder, first.files, s3_options) == second.files
    assert parquet.count_rows(folder, s3_options).files == first.files
