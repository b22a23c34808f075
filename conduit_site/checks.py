"""System checks of Conduit's own settings (``manage.py check --deploy``)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def check_metrics_token(app_configs, **kwargs) -> list[Warning]:
    """Metrics served without a token are readable by anyone who reaches ``/metrics``."""
    if getattr(settings, "CONDUIT_METRICS", False) and not getattr(settings, "CONDUIT_METRICS_TOKEN", ""):
        return [
            Warning(
                "CONDUIT_METRICS is on without CONDUIT_METRICS_TOKEN: anyone who reaches /metrics reads it.",
                hint="Set CONDUIT_METRICS_TOKEN (scrapes send it as a bearer token), or keep /metrics "
                "off every address but the scraper's.",
                id="conduit.W001",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def check_proxy_secret(app_configs, **kwargs) -> list[Warning]:
    """Proxies trusted by address alone: any process on the proxy's host can name a client."""
    if getattr(settings, "CONDUIT_TRUSTED_PROXIES", []) and not getattr(settings, "CONDUIT_PROXY_SECRET", ""):
        return [
            Warning(
                "CONDUIT_TRUSTED_PROXIES is set without CONDUIT_PROXY_SECRET: any process that reaches "
                "the web processes from a proxy's address can choose the address sign-in lockouts count.",
                hint="Set CONDUIT_PROXY_SECRET, and have the proxy send it as X-Conduit-Proxy "
                "(deploy/Caddyfile does).",
                id="conduit.W002",
            )
        ]
    return []
