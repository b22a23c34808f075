"""Fixtures shared by the Work engine tests. None is autouse; a module that defines its own
fixture of the same name keeps its own."""

from __future__ import annotations

import pytest

from tests.worklife.enginekit import runner


@pytest.fixture
def loop(clock):
    r = runner(clock)
    yield r
    r.shutdown(grace=0)
