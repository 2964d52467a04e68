"""Intake settings, read lazily from Django settings (``INTAKE_*``), never at import."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from intake.addresses import AllowList

DEFAULTS: dict[str, object] = {
    # Internal sources a deployment lets tenants' URLs reach: CIDRs ("10.20.0.0/16",
    # "127.0.0.1") and host names ("directory.internal"). Any other URL must resolve to
    # public internet addresses only.
    "HTTP_ALLOW": [],
    # Where validated uploads wait for the job that reads them: a local directory or any
    # fsspec URL ("s3://bucket/staging", "memory://staging" in tests). Every web and
    # worker process must see the same place. None: VAR_DIR / "staging".
    "STAGING_URL": None,
    # Keyword arguments of the fsspec filesystem (credentials, endpoint, region).
    "STAGING_OPTIONS": {},
    # The most one staged file may hold, whatever its caller's own limit.
    "STAGING_MAX_BYTES": 1024 * 1024 * 1024,
}


def get(name: str) -> object:
    return getattr(settings, f"INTAKE_{name}", DEFAULTS[name])


def http_allow_list() -> AllowList:
    """``INTAKE_HTTP_ALLOW`` parsed (a few entries: cheap enough to parse per fetch, and a
    test's settings override takes effect at once)."""
    entries = get("HTTP_ALLOW")
    if isinstance(entries, str):
        entries = entries.split(",")
    try:
        return AllowList.parse(str(entry) for entry in entries if str(entry).strip())  # type: ignore[attr-defined]
    except ValueError as exc:
        raise ImproperlyConfigured(f"INTAKE_HTTP_ALLOW: {exc}") from exc


def staging_url() -> str:
    configured = get("STAGING_URL")
    return str(configured) if configured else str(Path(settings.VAR_DIR) / "staging")


def staging_options() -> dict[str, Any]:
    options = get("STAGING_OPTIONS")
    if not isinstance(options, Mapping):
        raise ImproperlyConfigured("INTAKE_STAGING_OPTIONS: a dict of fsspec filesystem arguments")
    return dict(options)


def staging_max_bytes() -> int:
    return int(get("STAGING_MAX_BYTES"))  # type: ignore[call-overload]
