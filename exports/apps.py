from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "exports"
    verbose_name = "Exports"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from exports import checks  # noqa: F401  (registers the system checks)
