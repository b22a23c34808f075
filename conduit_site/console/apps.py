from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """Installed so Django finds the console's template tag libraries; it has no models."""

    name = "conduit_site.console"
    label = "console"
