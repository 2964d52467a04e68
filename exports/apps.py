from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "exports"
    verbose_name = "Exports"
    default_auto_field = "django.db.models.BigAutoField"
