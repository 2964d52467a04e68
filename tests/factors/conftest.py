from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def upload_dir(tmp_path, settings):
    """Staged uploads of each test in a directory of its own: the factors' area of a
    staging root of its own."""
    settings.INTAKE_STAGING_URL = str(tmp_path / "staging")
    return tmp_path / "staging" / "factors"


@pytest.fixture
def source_server(settings):
    """A source on 127.0.0.1. The outbound rules refuse loopback addresses unless the
    allow-list names them, as a deployment names its internal sources."""
    from tests.support.http_source import SourceServer

    settings.INTAKE_HTTP_ALLOW = ["127.0.0.1"]
    with SourceServer() as server:
        yield server
