"""Configuration documents: parsing and validation, and the effective configuration.

A document (YAML, see "The configuration document" in ``docs/routing.md``) declares scopes
with named bindings and ordered routes. :func:`parse_document` validates all of it and raises
:class:`ConfigInvalid` listing every problem with its place in the document
(``scopes[1].routes[0].binding: unknown binding 'triag'``); ``routing.config.services`` stores a
valid document as a Generation.

:func:`load_configuration` reads a stored Generation into an immutable :class:`Configuration`:
per scope, the routes resolved root to leaf with override slots replaced in place, and the
bindings visible there, a child's redefinition winning (R3).

One idea per module: :mod:`~routing.config.reader` (YAML with places),
:mod:`~routing.config.validate` (the document's rules, :func:`parse_document`),
:mod:`~routing.config.document` (the parsed document), :mod:`~routing.config.receivers` (a
receiver's declaration), :mod:`~routing.config.effective`
(resolution, R3), :mod:`~routing.config.selectors` (stored generations),
:mod:`~routing.config.problems`. Import from the module that holds a name: the package imports
none of them, so a reader of stored configuration (``events get``) does not load the validator.
"""
