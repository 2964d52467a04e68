from django.apps import AppConfig

import jobs


class ExportsConfig(AppConfig):
    name = "exports"
    verbose_name = "Exports"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from exports import checks  # noqa: F401  (registers the system checks)

        # The exports' jobs, snapshots and polls on /metrics.
        from exports.metrics import ExportCollector

        jobs.register_collector(ExportCollector)
