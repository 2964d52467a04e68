from django.apps import AppConfig


class MarketConfig(AppConfig):
    name = "market"
    label = "market"
    verbose_name = "Market data"
    default_auto_field = "django.db.models.BigAutoField"
