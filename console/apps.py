"""The console's app, and Django's admin as Conveyor runs it.

The console comes before the pipelines in ``INSTALLED_APPS``, so its own ``ready`` runs
before their admins are registered; it imports every app's ``overview.py``, where each
registers its front-page figures (``console.figures``). ``AdminConfig`` takes ``django.contrib.admin``'s place
in ``INSTALLED_APPS`` instead: once the admin's own ``ready`` has discovered every app's
registrations, it names the admin and drops django-q2's task lists from it
(``console.admin_site``).
"""

from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps
from django.utils.module_loading import autodiscover_modules


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Conveyor console"

    def ready(self) -> None:
        # Every app's overview.py registers its front-page figures
        # (@console.admin.front_page_figures).
        autodiscover_modules("overview")


class AdminConfig(admin_apps.AdminConfig):
    # Not the console package's own app: that is ConsoleConfig.
    default = False

    def ready(self) -> None:
        super().ready()
        from console import admin_site

        admin_site.configure()
