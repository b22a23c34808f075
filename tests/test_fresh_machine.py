"""The test commands on a fresh machine: browser tests without Chromium, pytest in a fresh clone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.browser.conftest import ENABLE_HINT, SCREENSHOTS_ENV, chromium_gate, in_ci, keep_screenshots

ROOT = Path(settings.BASE_DIR)


# --- browser tests without Chromium ------------------------------------------------------------


def test_browser_tests_run_when_chromium_is_there(tmp_path):
    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    assert chromium_gate(str(chromium), {}) is None
    assert chromium_gate(str(chromium), {"CI": "true"}) is None


@pytest.mark.parametrize("ci", [None, "", "0", "false", "False", "no"])
def test_without_chromium_browser_tests_are_skipped_with_how_to_enable_them(tmp_path, ci):
    environ = {} if ci is None else {"CI": ci}
    missing = tmp_path / "chromium"
    action, why = chromium_gate(str(missing), environ)
    assert action == "skip" and not in_ci(environ)
    assert why == f"Chromium not found at {missing}: {ENABLE_HINT}"
    assert "\n" not in why and "apt-get install chromium" in why


@pytest.mark.parametrize("ci", ["true", "1", "yes", "TRUE"])
def test_without_chromium_browser_tests_fail_in_ci(tmp_path, ci):
    missing = tmp_path / "chromium"
    action, why = chromium_gate(str(missing), {"CI": ci})
    assert action == "fail" and in_ci({"CI": ci})
    assert why.startswith(f"Chromium not found at {missing}: {ENABLE_HINT}") and "CI is set" in why


def test_a_file_that_is_not_executable_is_no_chromium(tmp_path):
    chromium = tmp_path / "chromium"
    chromium.write_text("")
    chromium.chmod(0o644)
    assert chromium_gate(str(chromium), {})[0] == "skip"
    assert chromium_gate(str(tmp_path), {})[0] == "skip", "a directory is no browser either"


# --- pytest in a fresh clone ----------------------------------------------------------------------


@pytest.mark.slow
def test_pytest_runs_in_a_fresh_clone_without_var(tmp_path):
    """``pytest`` straight after ``git clone`` (no ``var/``, embedded SQLite) runs a database
    test instead of failing with "unable to open database file". The clone is of the committed
    HEAD, as a fresh machine would have it."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(
        [git, "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert not (clone / "var").exists()
    environ = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "TEST_DATABASE_NAME", "CONDUIT_VAR_DIR", "PYTEST_ADDOPTS")
        and not name.startswith("DJANGO_")
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/routing/config/test_selectors.py",
            "-k",
            "test_r3_unknown_scope_is_none",
        ],
        cwd=clone,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 passed" in output and "unable to open database file" not in output
    assert (clone / "var").is_dir()


def test_browser_screenshots_are_kept_as_ci_artifacts(tmp_path):
    """Evidence: a browser test's screenshots are copied to ``$CONDUIT_SCREENSHOTS``,
    one folder per test, which ``.ci/run`` sets; unset, nothing is copied."""
    shots = tmp_path / "test"
    shots.mkdir()
    (shots / "after-skip.png").write_bytes(b"\x89PNG")
    (shots / "notes.txt").write_text("not a screenshot")
    kept = tmp_path / "kept"
    nodeid = "tests/browser/test_x.py::test_y[1280]"
    assert keep_screenshots(shots, nodeid, {}) is None
    folder = keep_screenshots(shots, nodeid, {SCREENSHOTS_ENV: str(kept)})
    assert folder == kept / "tests_browser_test_x.py_test_y_1280"
    assert [p.name for p in folder.iterdir()] == ["after-skip.png"]
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert ci.count("CONDUIT_SCREENSHOTS=") == 2  # the SQLite and the PostgreSQL run
