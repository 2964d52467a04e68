"""Staged files through fsspec: kept only when valid, named by ids that cannot leave the
store, bounded, listed by age for cleanup, and read back by COPY."""

from __future__ import annotations

import io
import os
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection

from intake import staging
from intake.csv_validation import Column, CsvSchema

SCHEMA = CsvSchema(
    "pairs", (Column("code", "code"), Column("amount", "number")), unique=("code",), max_bytes=1024 * 1024
)
BODY = b"code,amount\nA1,12.5\n b2 ,7\n"


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path) -> staging.Store:
    """The same store over two filesystems: memory (as tests use) and a local directory."""
    if request.param == "memory":
        url = f"memory://staging-{uuid.uuid4().hex}/area"
    else:
        url = str(tmp_path / "staging" / "area")
    return staging.Store(url, max_bytes=1024 * 1024)


def test_a_valid_file_is_staged_as_its_canonical_rows(store):
    report, staged = staging.stage_csv(store, io.BytesIO(BODY), SCHEMA)

    assert report.ok and staged is not None
    assert (staged.rows, staged.columns) == (2, ("code", "amount"))
    with store.open(staged.id) as handle:
        assert handle.read() == b"A1,12.5\nb2,7\n"
    assert [found.staged_id for found in store.files()] == [staged.id]
    assert store.size(staged.id) == len(b"A1,12.5\nb2,7\n")


def test_a_refused_file_leaves_nothing(store):
    report, staged = staging.stage_csv(store, io.BytesIO(b"code,amount\nA1,=1\n"), SCHEMA)

    assert staged is None and [e.column for e in report.errors] == ["amount"]
    assert store.files() == []


def test_a_file_known_to_be_too_large_is_refused_before_it_is_read(store):
    source = io.BytesIO(BODY)
    source.size = 2 * 1024 * 1024  # as Django's UploadedFile says

    report, staged = staging.stage_csv(store, source, SCHEMA)

    assert staged is None and source.tell() == 0
    assert [str(e) for e in report.errors] == [
        "file: the file is larger than the 1 MB limit: split it into smaller files"
    ]


def test_writes_stop_at_the_stores_bound_and_leave_nothing(store):
    small = staging.Store(store.url, max_bytes=10)

    report, staged = staging.stage_csv(small, io.BytesIO(BODY), SCHEMA)

    assert staged is None
    assert [str(e) for e in report.errors] == [
        "file: the file is larger than the 1 kB limit: split it into smaller files"
    ]
    assert small.files() == []
    with pytest.raises(staging.StagedTooLarge), small.stage() as pending:
        pending.write(b"x" * 11)
    assert small.files() == []


def test_a_file_is_kept_only_when_its_writer_keeps_it_and_ends_cleanly(store):
    with store.stage() as dropped:
        dropped.write(b"not kept\n")
    with pytest.raises(RuntimeError), store.stage() as failed:
        failed.write(b"half\n")
        failed.keep()
        raise RuntimeError("the writer broke")
    assert store.files() == []
    assert not store.exists(dropped.id) and not store.exists(failed.id)


@pytest.mark.parametrize(
    "bad",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "a" * 32 + "/..",
        "",
        "ABCDEF0123456789ABCDEF0123456789",
        "0" * 31,
        "0" * 33,
        "s3://bucket/key",
        "0" * 31 + "\n",
    ],
)
def test_only_staged_ids_name_files(store, bad):
    assert not staging.is_staged_id(bad)
    for operation in (store.path, store.open, store.exists, store.delete, store.location):
        with pytest.raises(staging.NotStaged):
            result = operation(bad)
            if hasattr(result, "__enter__"):
                with result:
                    pass


def test_a_missing_file_is_not_staged_and_deleting_it_twice_is_fine(store):
    gone = uuid.uuid4().hex
    assert not store.exists(gone)
    with pytest.raises(staging.NotStaged), store.open(gone):
        pass
    store.delete(gone)
    store.delete(gone)


def test_old_files_are_listed_partial_ones_and_strays_included(store):
    _, old = staging.stage_csv(store, io.BytesIO(BODY), SCHEMA)
    _, new = staging.stage_csv(store, io.BytesIO(BODY), SCHEMA)
    fs, root = store._fs
    with fs.open(f"{root}/stray.txt", "wb") as handle:
        handle.write(b"x")
    if "memory" not in store.url:  # a local file's age is its mtime
        hour_ago = time.time() - 3600
        for name in (old.id, "stray.txt"):
            os.utime(f"{root}/{name}", (hour_ago, hour_ago))
        listed = store.older_than(timedelta(minutes=30))
        assert sorted(f.name for f in listed) == sorted([old.id, "stray.txt"])
    listed = store.older_than(timedelta(0))
    assert {f.staged_id for f in listed} == {old.id, new.id, None}

    for found in listed:
        store.remove(found)
    assert store.files() == []
    with pytest.raises(staging.StagingError):
        store.remove(staging.StoredFile("../x", None, listed[0].modified, 0))


def test_an_area_is_a_plain_name_under_the_configured_root(settings):
    settings.INTAKE_STAGING_URL = "memory://root/"
    assert staging.store("factors").url == "memory://root/factors"
    for bad in ("", "../x", "a/b", "Upper", "x" * 41):
        with pytest.raises(ValueError):
            staging.store(bad)


def test_the_default_root_is_under_var(settings):
    del settings.INTAKE_STAGING_URL
    assert staging.store("factors").url == f"{settings.VAR_DIR}/staging/factors"


@pytest.mark.django_db
def test_a_staged_file_is_read_back_with_copy(store):
    body = b"code,amount\n" + b"".join(b"c%d,%d.5\n" % (i, i) for i in range(3000))
    _, staged = staging.stage_csv(store, io.BytesIO(body), SCHEMA)

    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE staged_pairs (code text, amount numeric)")
        with (
            store.open(staged.id) as handle,
            cursor.copy("COPY staged_pairs (code, amount) FROM STDIN (FORMAT csv)") as copy,
        ):
            while chunk := handle.read(4096):
                copy.write(chunk)
        cursor.execute("SELECT count(*), sum(amount) FROM staged_pairs")
        count, total = cursor.fetchone()
    assert (count, float(total)) == (3000, sum(i + 0.5 for i in range(3000)))


def test_a_staging_url_fsspec_cannot_load_fails_the_system_check(settings):
    from intake.checks import check_staging

    assert check_staging() == []
    settings.INTAKE_STAGING_URL = "nosuchfs://bucket/staging"
    [error] = check_staging()
    assert error.id == "intake.E002" and "nosuchfs" in error.msg
    settings.INTAKE_STAGING_URL = "memory://staging"
    settings.INTAKE_STAGING_OPTIONS = "not a dict"
    [error] = check_staging()
    assert "INTAKE_STAGING_OPTIONS" in error.msg
