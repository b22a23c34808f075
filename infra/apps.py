from django.apps import AppConfig


class InfraConfig(AppConfig):
    """The helpers every app uses; its one table is the live-update outbox (``infra.live``)."""

    name = "infra"
    label = "infra"
    verbose_name = "Infrastructure"
    default_auto_field = "django.db.models.BigAutoField"
