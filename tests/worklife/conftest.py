"""Fixtures shared by the Work engine tests. None is autouse; a module that defines its own
fixture of the same name keeps its own."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.worklife.enginekit import runner


@pytest.fixture
def loop(clock):
    r = runner(clock)
    yield r
    r.shutdown(grace=0)


@pytest.fixture
def work_tmp():
    """A folder a Work's processes may write in: they run as the work user (``nobody`` when the
    tests run as root), who cannot enter pytest's own temporary folders."""
    path = tempfile.mkdtemp(prefix="conduit-work-")
    os.chmod(path, 0o1777)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)
