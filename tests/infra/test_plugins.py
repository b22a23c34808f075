"""Plugins named in settings: dotted paths and the registries built on them."""

from __future__ import annotations

import pytest

from infra.plugins import RegistrationError, import_dotted


def test_r1_import_dotted_errors_name_the_path():
    with pytest.raises(RegistrationError, match="not a dotted path"):
        import_dotted("nodots")
    with pytest.raises(RegistrationError, match="has no attribute 'Nope'"):
        import_dotted("worklife.executors:Nope")
