from django.apps import AppConfig


class ControlsConfig(AppConfig):
    name = "controls"
    default_auto_field = "django.db.models.BigAutoField"
