"""The tenants the exports' tests act for, and an S3 endpoint: moto's server mode, a real
HTTP S3 API that s3fs talks to, with a bucket ``exports``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.support.base import tenant


@pytest.fixture
def acme():
    return tenant("Acme")


@pytest.fixture
def globex():
    return tenant("Globex")


@pytest.fixture(scope="module")
def s3_options() -> Iterator[dict]:
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # S3 refuses us-east-1 as a bucket's location constraint, which s3fs sends when told a
    # region: the bucket is made without one. moto's buckets outlive its server in this
    # process, so another module's server may have made it already.
    with contextlib.suppress(FileExistsError):
        s3fs.S3FileSystem(key="x", secret="y", endpoint_url=endpoint, skip_instance_cache=True).mkdir(
            "exports"
        )
    yield {"key": "x", "secret": "y", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    server.stop()
