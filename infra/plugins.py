"""Plugins named in settings: a registry maps a name to a dotted path (``"pkg.mod.Class"`` or
``"pkg.mod:Class"``), read from a setting each time it is asked, so a user's own package adds
plugins. Route handlers (``CONDUIT_ROUTE_HANDLERS``) and executors (``CONDUIT_EXECUTORS``) are
two such registries."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings

# --- loading dotted paths ----------------------------------------------------------------


class RegistrationError(ImportError):
    """A registered dotted path cannot be imported, or names the wrong kind of object."""


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def split_dotted(path: str) -> tuple[str, str]:
    """Split ``"pkg.mod:Attr"`` or ``"pkg.mod.Attr"`` into ``("pkg.mod", "Attr")``.

    The part after a colon may itself be dotted (``"pkg.mod:Outer.Inner"``).
    """
    if not isinstance(path, str):
        raise RegistrationError(f"expected a dotted path string, got {type(path).__name__}")
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr or not _DOTTED.match(module) or not _DOTTED.match(attr):
        raise RegistrationError(f"{path!r} is not a dotted path like 'pkg.mod.Name' or 'pkg.mod:Name'")
    return module, attr


@lru_cache(maxsize=256)
def import_dotted(path: str) -> Any:
    """Import and return the object a dotted path names (cached per path).

    Raises :class:`RegistrationError` naming the path when the module or attribute is
    missing.
    """
    module_name, attr = split_dotted(path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistrationError(f"cannot import {module_name!r} for {path!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistrationError(f"{module_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


# --- a registry ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginRegistry:
    """The plugins of one kind: ``setting`` maps a name to a dotted path; a name that is not
    registered, or whose path cannot be imported or names something ``accepts`` refuses,
    raises ``missing`` with a message naming the ``kind``, the name and the path (``shape``
    says what an accepted object is)."""

    setting: str
    kind: str
    missing: type[LookupError]
    shape: str = "a class"
    accepts: Callable[[type], bool] = lambda cls: True

    def registered(self) -> dict[str, str]:
        """The setting as read now: name -> dotted path."""
        return dict(getattr(settings, self.setting, {}) or {})

    def load(self, name: str) -> type:
        """The class registered as ``name``; raises ``missing`` saying why there is none."""
        path = self.registered().get(name)
        if path is None:
            raise self.missing(f"{self.kind} {name!r} is not registered")
        try:
            cls = import_dotted(path)
        except RegistrationError as exc:
            raise self.missing(
                f"{self.kind} {name!r} is registered as {path!r} but cannot be loaded: {exc}"
            ) from exc
        if not inspect.isclass(cls) or not self.accepts(cls):
            raise self.missing(f"{self.kind} {name!r} is registered as {path!r}, which is not {self.shape}")
        return cls

    def find(self, name: str) -> type | None:
        """The class registered as ``name``, or ``None`` when there is none usable."""
        try:
            return self.load(name)
        except self.missing:
            return None
