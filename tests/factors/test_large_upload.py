"""A 200 MB file, generated on the fly: refused with a clear error, never loaded into
memory, nothing written."""

from __future__ import annotations

import http.client
import json
import select
import tracemalloc
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from factors import csv_schemas, services
from factors.models import DataEntry
from intake.csv_validation import validate
from jobs.models import Job
from tests.support.base import operating, staff
from tests.support.factors.builders import module, report

MB = 1024 * 1024


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "entries-200mb.csv"
    block = "".join(f"{i % 9000 + 1}.5,km,short,economy\n" for i in range(25_000)).encode()
    with path.open("wb") as out:
        out.write(b"quantity,unit,haul,cabin\n")
        while out.tell() < 200 * MB:
            out.write(block)
    yield path
    path.unlink()


class SizelessStream:
    """A stream whose size nobody can know in advance (a socket, a pipe)."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def read(self, size: int = -1) -> bytes:
        return self.handle.read(size)


@pytest.mark.django_db(transaction=True)
def test_a_200_mb_upload_is_refused_over_http_before_its_body_is_read(live_server, big_file):
    travel = module(report())
    token = Token.objects.create(user=operating(staff("olga", operator=True)))
    boundary = "conveyor-test-boundary"
    fields = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in [("report", travel.report_id), ("module", "travel"), ("data_entry_type", "plane")]
    )
    head = (
        fields + f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="big.csv"\r\nContent-Type: text/csv\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    host, port = live_server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/sync/dispatch")
    conn.putheader("Authorization", f"Token {token.key}")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    conn.putheader("Content-Length", str(len(head) + big_file.stat().st_size + len(tail)))
    conn.endheaders()
    sent = 0
    try:
        conn.send(head)
        with big_file.open("rb") as handle:
            while chunk := handle.read(256 * 1024):
                if select.select([conn.sock], [], [], 0)[0]:
                    break  # the server answered before reading the body
                conn.send(chunk)
                sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()

    assert response.status == 413
    assert body["detail"].endswith("the limit for entries files is 100 MB: split the file")
    assert sent < 50 * MB
    assert not DataEntry.objects.exists() and not Job.objects.exists()


@pytest.mark.django_db
def test_a_200_mb_file_is_refused_by_the_service_without_reading_it(big_file, upload_dir):
    travel = module(report())
    with big_file.open("rb") as handle:
        with pytest.raises(services.UploadRejected) as refused:
            services.dispatch_csv(travel, "plane", handle, filename="big.csv")
        assert handle.tell() == 0

    assert str(refused.value.report.errors[0]) == (
        "file: the file is larger than the 100 MB limit: split it into smaller files"
    )
    assert not Job.objects.exists() and not list(upload_dir.glob("*"))


def test_a_200_mb_stream_of_unknown_size_is_read_up_to_the_limit_in_little_memory(big_file):
    schema = csv_schemas.entries("plane")
    limited = type(schema)(schema.label, schema.columns, max_bytes=4 * MB)
    tracemalloc.start()
    with big_file.open("rb") as handle:
        report = validate(SizelessStream(handle), limited)
        read = handle.tell()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert [str(e) for e in report.errors] == [
        "file: the file is larger than the 4 MB limit: split it into smaller files"
    ]
    assert 4 * MB < read <= 5 * MB  # stopped one chunk past the limit
    assert peak < 12 * MB  # chunks of 1 MB, decoded and split: never the file
