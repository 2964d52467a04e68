from django.apps import AppConfig


class FactorsConfig(AppConfig):
    name = "factors"
    verbose_name = "CO2 calculator"
    default_auto_field = "django.db.models.BigAutoField"
