from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def upload_dir(tmp_path, settings):
    """Staged uploads of each test in a directory of its own."""
    settings.FACTORS_UPLOAD_DIR = str(tmp_path / "uploads")
    return tmp_path / "uploads"


@pytest.fixture
def source_server(settings):
    """A source on 127.0.0.1. The outbound rules refuse loopback addresses unless the
    allow-list names them, as a deployment names its internal sources."""
    from tests.http_source import SourceServer

    settings.INTAKE_HTTP_ALLOW = ["127.0.0.1"]
    with SourceServer() as server:
        yield server
