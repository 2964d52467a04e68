"""The demos' surroundings: staged uploads and ingest files under the test's own
directory, and the fake market-data API on 127.0.0.1 allowed by the outbound rules."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def demo_dirs(tmp_path, settings):
    settings.INTAKE_STAGING_URL = str(tmp_path / "staging")
    settings.INGEST_FILE_ROOTS = [str(tmp_path / "files")]
    settings.INTAKE_HTTP_ALLOW = ["127.0.0.1"]
    return tmp_path
