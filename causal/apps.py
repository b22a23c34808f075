from django.apps import AppConfig


class CausalConfig(AppConfig):
    name = "causal"
    default_auto_field = "django.db.models.BigAutoField"
