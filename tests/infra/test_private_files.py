"""Private files under ``var/``: folders 0700, files 0600, also after ``migrate`` and ``make``."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from infra.private_files import private_directory, private_file

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_directory_and_file_are_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        folder = private_directory(tmp_path / "var" / "deeper")
        assert mode(folder) == 0o700
        file = private_file(folder / "conduit.sqlite3")
        assert mode(file) == 0o600
        loose = tmp_path / "loose"
        loose.mkdir(mode=0o755)
        (loose / "old.sqlite3").write_text("")
        (loose / "old.sqlite3").chmod(0o644)
        private_directory(loose)
        private_file(loose / "old.sqlite3")
        assert (mode(loose), mode(loose / "old.sqlite3")) == (0o700, 0o600)
    finally:
        os.umask(old)


def test_the_database_and_var_are_private_after_migrate(tmp_path):
    var_dir = tmp_path / "fresh-var"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_NAME")}
    env["CONDUIT_VAR_DIR"] = str(var_dir)
    subprocess.run(
        ["/bin/sh", "-c", f"umask 022 && exec {sys.executable} manage.py migrate --noinput -v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    assert mode(var_dir) == 0o700
    files = sorted(var_dir.glob("conduit.sqlite3*"))
    assert var_dir / "conduit.sqlite3" in files
    assert {path.name: mode(path) for path in files} == {path.name: 0o600 for path in files}


def test_make_creates_var_0700_and_the_password_file_0600():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "mkdir -p -m 700 $@" in makefile
    assert "(umask 077; printf '%s\\n' \"$$password\" > $(VAR)/operator-password)" in makefile
    assert "chmod 600 $(VAR)/operator-password" in makefile
