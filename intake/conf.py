"""Intake settings, read from Django settings each time (``INTAKE_*``), never at import."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from appsettings import AppSettings
from intake.addresses import AllowList

SETTINGS = AppSettings("INTAKE_")
get = SETTINGS.get


def _allow_list(entries: Any) -> AllowList:
    """Parsed at each call (a few entries: cheap enough per fetch, and a test's settings
    override takes effect at once); a comma-separated string is taken too."""
    if isinstance(entries, str):
        entries = entries.split(",")
    try:
        return AllowList.parse(str(entry) for entry in entries if str(entry).strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"INTAKE_HTTP_ALLOW: {exc}") from exc


def _staging_root(configured: Any) -> str:
    return str(configured) if configured else str(Path(settings.VAR_DIR) / "staging")


def _filesystem_arguments(options: Any) -> dict[str, Any]:
    if not isinstance(options, Mapping):
        raise ImproperlyConfigured("INTAKE_STAGING_OPTIONS: a dict of fsspec filesystem arguments")
    return dict(options)


# Internal sources a deployment lets tenants' URLs reach: CIDRs ("10.20.0.0/16",
# "127.0.0.1") and host names ("directory.internal"). Any other URL must resolve to
# public internet addresses only.
http_allow_list = SETTINGS.declare("HTTP_ALLOW", _allow_list, [])
# Where validated uploads wait for the job that reads them: a local directory or any
# fsspec URL ("s3://bucket/staging", "memory://staging" in tests). Every web and worker
# process must see the same place. Empty: VAR_DIR / "staging".
staging_url = SETTINGS.declare("STAGING_URL", _staging_root, "")
# Keyword arguments of the fsspec filesystem (credentials, endpoint, region).
staging_options = SETTINGS.declare("STAGING_OPTIONS", _filesystem_arguments, {})
# The most one staged file may hold, whatever its caller's own limit.
staging_max_bytes = SETTINGS.integer("STAGING_MAX_BYTES", 1024 * 1024 * 1024)
