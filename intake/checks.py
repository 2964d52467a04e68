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
        return [Error(str(exc), hint="List CIDRs (10.20.0.0/16) and host names, comma-separated.",
                      id="intake.E001")]
    return []
