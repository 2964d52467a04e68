"""The development tools as a Django app, for ``manage.py demo``: installed by the
settings only with ``DEBUG`` and only where the package exists (a checkout)."""

from __future__ import annotations

from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    name = "devtools"
    verbose_name = "Development tools"
