"""The project's own app: last in INSTALLED_APPS, so that its ``ready`` runs once every
app's admin registrations are in (the admin's autodiscovery runs in its own ``ready``)."""

from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "project"
    label = "project"
    verbose_name = "Conveyor console"

    def ready(self) -> None:
        from project import admin_site

        admin_site.configure()
