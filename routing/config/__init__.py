"""Configuration documents: parsing and validation, and the effective configuration.

A document (YAML, see the configuration format design page) declares scopes with named
bindings and ordered routes. :func:`parse_document` validates all of it and raises
:class:`ConfigInvalid` listing every problem with its place in the document
(``scopes[1].routes[0].binding: unknown binding 'triag'``); ``routing.services`` stores a
valid document as a Generation.

:func:`load_configuration` reads a stored Generation into an immutable :class:`Configuration`:
per scope, the routes resolved root to leaf with override slots replaced in place, and the
bindings visible there, a child's redefinition winning (R3).

One idea per module: :mod:`~routing.config.reader` (YAML with places),
:mod:`~routing.config.validate` (the document's rules, :func:`parse_document`),
:mod:`~routing.config.document` (the parsed document), :mod:`~routing.config.effective`
(resolution, R3), :mod:`~routing.config.selectors` (stored generations),
:mod:`~routing.config.problems`. The names below are re-exported for existing callers.
"""

from routing.config.document import ParsedBinding, ParsedDocument, ParsedRoute, ParsedScope
from routing.config.effective import (
    Configuration,
    EffectiveBinding,
    EffectiveRoute,
    EffectiveScope,
    build_configuration,
    effective_scope_as_dict,
)
from routing.config.problems import ConfigInvalid, ConfigProblem, GenerationNotFound
from routing.config.reader import MAX_DOCUMENT_BYTES, MAX_NODES
from routing.config.selectors import find_generation, live_generation, load_configuration
from routing.config.validate import (
    BINDING_POLICIES,
    CONTROL_POLICIES,
    FALLBACKS,
    POLICIES,
    SUPPORTED_VERSIONS,
    parse_document,
)

__all__ = [
    "BINDING_POLICIES",
    "CONTROL_POLICIES",
    "FALLBACKS",
    "MAX_DOCUMENT_BYTES",
    "MAX_NODES",
    "POLICIES",
    "SUPPORTED_VERSIONS",
    "ConfigInvalid",
    "ConfigProblem",
    "Configuration",
    "EffectiveBinding",
    "EffectiveRoute",
    "EffectiveScope",
    "GenerationNotFound",
    "ParsedBinding",
    "ParsedDocument",
    "ParsedRoute",
    "ParsedScope",
    "build_configuration",
    "effective_scope_as_dict",
    "find_generation",
    "live_generation",
    "load_configuration",
    "parse_document",
]
