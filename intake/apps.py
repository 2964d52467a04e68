from django.apps import AppConfig


class IntakeConfig(AppConfig):
    name = "intake"
    verbose_name = "Intake"

    def ready(self) -> None:
        from intake import checks  # noqa: F401 (registers the system checks)
