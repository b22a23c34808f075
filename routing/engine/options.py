"""How a router runs: its options, defaults from settings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings


@dataclass(frozen=True, slots=True)
class RouterOptions:
    """How a router runs. Defaults come from settings (``CONDUIT_ROUTE_TIMEOUT``…)."""

    route_timeout: float = 5.0
    max_route_failures: int = 5
    route_failure_window: timedelta = timedelta(minutes=15)
    workers: int = 4
    max_abandoned: int = 16
    batch_size: int = 500
    claim_seconds: float = 60.0
    max_retries: int = 3

    @classmethod
    def from_settings(cls, **overrides: Any) -> RouterOptions:
        values = {
            "route_timeout": float(settings.CONDUIT_ROUTE_TIMEOUT),
            "max_route_failures": int(settings.CONDUIT_MAX_ROUTE_FAILURES),
            "route_failure_window": timedelta(seconds=int(settings.CONDUIT_ROUTE_FAILURE_WINDOW)),
            "claim_seconds": float(settings.CONDUIT_ROUTE_CLAIM_SECONDS),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
