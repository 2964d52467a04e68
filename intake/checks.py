"""System checks for the intake's configuration (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, register
from django.core.exceptions import ImproperlyConfigured


@register(Tags.security)
def check_allow_list(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    from intake import conf

    try:
        conf.http_allow_list()
    except ImproperlyConfigured as exc:
        return [
            Error(
                str(exc), hint="List CIDRs (10.20.0.0/16) and host names, comma-separated.", id="intake.E001"
            )
        ]
    return []


@register()
def check_staging(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The staging root must name a filesystem fsspec knows and can load (s3:// needs
    s3fs installed, for instance): otherwise every upload would fail."""
    from fsspec.core import url_to_fs

    from intake import conf

    try:
        url_to_fs(conf.staging_url(), **conf.staging_options())
    except (ImproperlyConfigured, ImportError, ValueError, TypeError) as exc:
        return [
            Error(
                f"INTAKE_STAGING_URL {conf.staging_url()!r}: {exc}",
                hint="A local directory or an fsspec URL whose filesystem is installed "
                "(s3:// needs s3fs); INTAKE_STAGING_OPTIONS holds its arguments.",
                id="intake.E002",
            )
        ]
    return []
