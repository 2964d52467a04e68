from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobs import checks, cluster, conf, schedules  # noqa: F401  (registers checks and signals)

        # Every app's handlers.py registers its job types with @jobs.handler, and so do
        # the extra modules named in JOBS_HANDLER_MODULES (users' own code, test suites).
        autodiscover_modules("handlers")
        for module in conf.handler_modules():
            import_module(module)
