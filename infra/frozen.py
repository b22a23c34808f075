"""Frozen records for hot paths: ``@frozen`` is ``@dataclass(frozen=True, slots=True)`` with a
faster ``__init__``.

A frozen dataclass's generated ``__init__`` sets each field with
``object.__setattr__(self, name, value)``: a global lookup, an attribute lookup and the generic
attribute machinery per field. Building a 12-field one took 7.9 µs on the 2-core machine, 3.0 µs
with this ``__init__`` and 0.7 µs unfrozen. The router builds about ten such records per Event
(the snapshot, the verdicts, the decisions, the settlement, the outcome), about 120 fields:
its CPU per Event fell by about 7% with this.

``frozen`` keeps everything the dataclass is (fields, defaults, ``repr``, equality, hashing,
``FrozenInstanceError`` on assignment, ``dataclasses.replace``, pickling) and only replaces
``__init__`` with one that stores each field through its slot's descriptor directly, with the
same signature: positional and keyword parameters in field order, the same defaults,
``default_factory`` called per instance, keyword-only fields after ``*``, fields with
``init=False`` set from their defaults, then ``__post_init__``. A class using ``InitVar``
keeps the dataclass's own ``__init__``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, dataclass_transform

_MISSING = dataclasses.MISSING
# What the dataclass's own __init__ shows as the default of a field with a default_factory.
_FACTORY = getattr(dataclasses, "_HAS_DEFAULT_FACTORY", _MISSING)


@dataclass_transform(frozen_default=True)
def frozen(cls: type | None = None, /, **options: Any):
    """``@dataclass(frozen=True, slots=True, **options)`` with a faster ``__init__``."""

    def wrap(cls: type) -> type:
        return fast_init(dataclasses.dataclass(frozen=True, slots=True, **options)(cls))

    return wrap if cls is None else wrap(cls)


def fast_init(cls: type) -> type:
    """Replace a frozen slots dataclass's ``__init__`` with one that sets its slots directly
    (same signature and behaviour). Returns ``cls``."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not (params.frozen and params.init) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__qualname__} is not a frozen slots dataclass with an __init__")
    all_fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
    if any(f._field_type is not dataclasses._FIELD for f in all_fields.values()):  # InitVar, ClassVar
        return cls
    fields = dataclasses.fields(cls)
    # The function's own names cannot clash with a field's: they all start with "__r_".
    namespace: dict[str, Any] = {"__r_factory": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for index, f in enumerate(fields):
        setter, default, factory = f"__r_set{index}", f"__r_default{index}", f"__r_factory{index}"
        namespace[setter] = _slot(cls, f.name).__set__
        if f.default is not _MISSING:
            namespace[default] = f.default
        if f.default_factory is not _MISSING:
            namespace[factory] = f.default_factory
        if not f.init:
            if f.default is not _MISSING:
                body.append(f"    {setter}(__r_self, {default})")
            elif f.default_factory is not _MISSING:
                body.append(f"    {setter}(__r_self, {factory}())")
            continue
        if f.default is not _MISSING:
            parameter = f"{f.name}={default}"
            value = f.name
        elif f.default_factory is not _MISSING:
            parameter = f"{f.name}=__r_factory"
            value = f"{factory}() if {f.name} is __r_factory else {f.name}"
        else:
            parameter = value = f.name
        body.append(f"    {setter}(__r_self, {value})")
        (keyword if f.kw_only else positional).append(parameter)
    if hasattr(cls, "__post_init__"):
        body.append("    __r_self.__post_init__()")
    signature = ", ".join(["__r_self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, namespace)  # noqa: S102 - built here from the class's own field list
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init
    return cls


def _slot(cls: type, name: str):
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get(name)
        if descriptor is not None and hasattr(descriptor, "__set__"):
            return descriptor
    raise TypeError(f"{cls.__qualname__}.{name} has no slot")
