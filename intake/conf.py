"""Intake settings, read lazily from Django settings (``INTAKE_*``), never at import."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from intake.addresses import AllowList

DEFAULTS: dict[str, object] = {
    # Internal sources a deployment lets tenants' URLs reach: CIDRs ("10.20.0.0/16",
    # "127.0.0.1") and host names ("directory.internal"). Any other URL must resolve to
    # public internet addresses only.
    "HTTP_ALLOW": [],
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
