"""The package locks: requirements.txt (production) and requirements-dev.txt
(everything) pin every package with its hashes, written by ``make lock`` from the ``.in`` files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ("requirements.txt", "requirements-dev.txt")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>[^\s;]+)(\s*;\s*[^\\]+)?$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(path: Path) -> list[tuple[str, list[str]]]:
    """Each requirement of a lock: its line and its options (``--hash=…``), continuations joined."""
    logical, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        current += " " + line.removesuffix("\\").strip()
        if not line.endswith("\\"):
            if current.strip():
                logical.append(current.strip())
            current = ""
    out = []
    for line in logical:
        head, *options = line.split(" --")
        out.append((head.strip(), ["--" + option.strip() for option in options]))
    return out


def pins(path: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for head, _ in requirements(path):
        match = PIN.match(head)
        if match:
            found.setdefault(normalise(match["name"]), set()).add(match["version"])
    return found


@pytest.mark.parametrize("lock", LOCKS)
def test_every_locked_package_is_pinned_with_hashes(lock):
    entries = requirements(ROOT / lock)
    assert len(entries) > 20, f"{lock} locks only {len(entries)} packages"
    for head, options in entries:
        assert PIN.match(head), f"{lock}: {head!r} is not pinned with =="
        hashes = [option for option in options if option.startswith("--hash")]
        assert hashes, f"{lock}: {head!r} has no --hash=sha256:"
        for option in options:
            assert HASH.match(option), f"{lock}: {head!r} has {option!r}, not a sha256 hash"


@pytest.mark.parametrize("lock", LOCKS)
def test_the_locks_name_no_index(lock):
    text = (ROOT / lock).read_text()
    for option in ("--index-url", "--extra-index-url", "--find-links", "-i ", "-f ", "--trusted-host"):
        assert not any(line.lstrip().startswith(option) for line in text.splitlines()), (lock, option)
    assert "://" not in text, f"{lock} names an address"


@pytest.mark.parametrize(
    ("source", "lock"),
    [("requirements.in", "requirements.txt"), ("requirements-dev.in", "requirements-dev.txt")],
)
def test_each_lock_holds_its_inputs_pins(source, lock):
    """A pin changed in a ``.in`` file without ``make lock`` leaves the lock stale: caught here."""
    locked = pins(ROOT / lock)
    wanted = pins(ROOT / source)
    if source == "requirements-dev.in":
        wanted |= pins(ROOT / "requirements.in")
    assert wanted
    for name, versions in wanted.items():
        assert locked.get(name) == versions, f"{source} pins {name} {versions}, {lock} {locked.get(name)}"


def test_development_installs_production_s_locked_versions():
    production, development = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    for name, versions in production.items():
        assert development.get(name) == versions, name
