from django.apps import AppConfig

import jobs


class IngestConfig(AppConfig):
    name = "ingest"
    verbose_name = "Ingest"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The hooks' system checks register on import.
        # The hook runners' breakers on /metrics.
        from ingest.runs.metrics import BreakerCollector
        from ingest.runs.runners import checks  # noqa: F401

        # The scraped-reference ingester reads its model: registered once the apps are.
        from ingest.scraping import ingester  # noqa: F401

        jobs.register_collector(BreakerCollector)
