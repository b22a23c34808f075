"""The kinds of receivers by name: how each verifies and maps a delivery (what a declaration of
each may say is the configuration's, ``routing.config.receivers``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from routing.receivers import alertmanager, cloudevents, generic_hmac, github, slack
from routing.receivers.spec import Kind

KINDS: Mapping[str, Kind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (github.KIND, slack.KIND, alertmanager.KIND, cloudevents.KIND, generic_hmac.KIND)
    }
)


def kind_get(name: str) -> Kind:
    """The kind called ``name``; raises ``KeyError``."""
    return KINDS[name]
