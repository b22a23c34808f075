from django.apps import AppConfig


class WorklifeConfig(AppConfig):
    name = "worklife"
    default_auto_field = "django.db.models.BigAutoField"
