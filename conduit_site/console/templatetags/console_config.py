"""``{% live_binding_options scope as options %}`` and ``{% live_scope_paths as paths %}``: what
the live configuration offers where a binding or a scope is typed (a ``<datalist>``)."""

from __future__ import annotations

from django import template

from routing.config import selectors

register = template.Library()


@register.simple_tag
def live_binding_options(scope: str = "") -> list[selectors.BindingOption]:
    """The live bindings visible in ``scope`` (every live binding without one)."""
    return selectors.live_binding_options(scope)


@register.simple_tag
def live_scope_paths() -> list[str]:
    """The live configuration's scopes."""
    return selectors.live_scope_paths()
