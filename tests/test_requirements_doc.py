"""Requirement codes are defined once, in ``docs/requirements.md``, and never shown to users.

Code, tests, templates and docs cite codes (``R14``, ``W5``, ``D4``, ``I4``, ranges such as
``R13–R18``, test names such as ``test_r25_…``); each one cited must have its row on that page.
Help text, pages and the API document are read by people who have not seen the page: they show
no code at all."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import get_commands, load_command_class

from conduit_site.api.openapi import openapi_schema

ROOT = Path(__file__).resolve().parent.parent
DOC = Path("docs") / "requirements.md"

# The families in use: R (behaviour), D (the owner's choices), W (Work engine invariants),
# I (router invariants). A citation is the letter and a number without a leading zero, or a range.
CODE = re.compile(r"\b([RDWI])([1-9][0-9]?)\b(?:\s*[–-]\s*\1?([1-9][0-9]?)\b)?")
# A test named after a code (``test_r25_…``, ``test_w5_…``, ``test_d4_…``).
TEST_NAME_CODE = re.compile(r"\btest_([rdw])([1-9][0-9]?)_")
DEFINITION = re.compile(r"^\|\s*([RDWI][1-9][0-9]?)\s*\|", re.M)

SUFFIXES = {".py", ".html", ".md", ".txt", ".yaml", ".yml"}
NAMES = {"Makefile"}
# Not ours to cite codes in: environments, vendored and built files, runtime data, the locks.
SKIPPED_DIRS = {".git", ".venv", "node_modules", "static", "var", "__pycache__", "build", "dist"}
SKIPPED_FILES = {"requirements.txt", "requirements-dev.txt"}


def defined_codes(root: Path) -> set[str]:
    """The codes ``docs/requirements.md`` under ``root`` defines, one table row each."""
    return set(DEFINITION.findall((root / DOC).read_text(encoding="utf-8")))


def cited_codes(line: str) -> Iterator[str]:
    """Every code a line cites, a range counting each code inside it."""
    for match in CODE.finditer(line):
        family, first, last = match.group(1), int(match.group(2)), int(match.group(3) or match.group(2))
        for number in range(first, max(first, last) + 1):
            yield f"{family}{number}"
    for match in TEST_NAME_CODE.finditer(line):
        yield f"{match.group(1).upper()}{match.group(2)}"


def source_files(root: Path) -> Iterator[Path]:
    """The files of the repository that may cite codes: code, tests, templates, docs, settings."""
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.startswith(".") for part in relative.parts[:-1]):
            continue
        if path.name in SKIPPED_FILES or not path.is_file():
            continue
        if path.suffix in SUFFIXES or path.name in NAMES:
            yield path


def undefined_citations(root: Path) -> list[str]:
    """``path:line: code`` for each citation under ``root`` of a code the page does not define."""
    defined = defined_codes(root)
    found = []
    for path in source_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            for code in cited_codes(line):
                if code not in defined:
                    found.append(f"{path.relative_to(root)}:{number}: {code}")
    return found


def test_every_cited_requirement_code_is_defined_in_docs():
    assert undefined_citations(ROOT) == []


# A path the page names as where a code is implemented: a file or folder of the repository.
NAMED_PATH = re.compile(r"`([A-Za-z_][\w./-]*(?:/|\.py|\.html|\.md|\.in|\.txt|\.yaml))`")


def missing_paths(root: Path) -> list[str]:
    """``line: path`` for each path the page under ``root`` names that does not exist."""
    lines = (root / DOC).read_text(encoding="utf-8").splitlines()
    return [
        f"{number}: {match.group(1)}"
        for number, line in enumerate(lines, start=1)
        for match in NAMED_PATH.finditer(line)
        if not (root / match.group(1)).exists()
    ]


def test_every_place_the_requirements_page_names_exists():
    """Where a code is implemented stays true when modules move."""
    assert missing_paths(ROOT) == []


def test_the_place_check_names_the_line_of_a_path_that_is_gone(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "here.py").write_text("")
    (tmp_path / DOC).write_text("| R1 | one | `app/here.py`, `app/` |\n| R2 | two | `app/gone.py` |\n")
    assert missing_paths(tmp_path) == ["2: app/gone.py"]


def test_the_code_check_names_the_file_line_and_code_it_cannot_find(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / DOC).write_text("| Code | What |\n|---|---|\n| R1 | one |\n| W2 | two |\n| R3 | three |\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "module.py").write_text('"""Defined (R1, W2)."""\n# cites R9 and W2\n')
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "page.html").write_text("{# R1–R3, a range #}\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_d4_named_after_a_code(): ...\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "ignored.py").write_text("# R9 is not ours\n")

    assert undefined_citations(tmp_path) == [
        "app/module.py:2: R9",
        "templates/page.html:1: R2",
        "tests/test_x.py:1: D4",
    ]


def test_the_code_check_leaves_alone_what_only_looks_like_a_code(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / DOC).write_text("| R1 | one |\n")
    (tmp_path / "module.py").write_text(
        "x = 1  # noqa: E402\nT0 = 'conduit.W001'\ncolor = '#D3D3D3'\nR = 'R0 R100 r5 DR7'\n"
    )

    assert undefined_citations(tmp_path) == []


# --- what users read shows no code ---------------------------------------------------------------

USER_CODE = re.compile(r"\b[RDWI][1-9][0-9]?\b")


def project_commands() -> list[tuple[str, str]]:
    """``(app, command)`` for each management command the project's own apps define."""
    return sorted((app, name) for name, app in get_commands().items() if (ROOT / app.split(".")[0]).is_dir())


def helps(parser: argparse.ArgumentParser, prog: str) -> Iterator[tuple[str, str]]:
    """The help of a command's parser and of each of its subcommands, however deep."""
    yield prog, parser.format_help()
    for action in parser._actions:  # argparse offers no public way to walk its subparsers
        choices: Any = action.choices
        if isinstance(choices, dict):
            for name, sub in choices.items():
                if isinstance(sub, argparse.ArgumentParser):
                    yield from helps(sub, f"{prog} {name}")


def test_the_project_has_the_commands_the_help_check_reads():
    names = {name for _, name in project_commands()}
    assert {"work", "events", "route_loop", "doctor", "causal", "trace", "config"} <= names


@pytest.mark.parametrize(("app", "name"), project_commands())
def test_command_help_shows_no_requirement_code(app, name):
    parser = load_command_class(app, name).create_parser("manage.py", name)
    shown = [
        f"{prog}: {code}"
        for prog, text in helps(parser, f"manage.py {name}")
        for code in USER_CODE.findall(text)
    ]
    assert shown == []


def test_the_help_check_reads_subcommands():
    progs = [
        prog
        for prog, _ in helps(
            load_command_class(get_commands()["work"], "work").create_parser("manage.py", "work"), "work"
        )
    ]
    assert "work cancel" in progs


TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))


def test_the_template_check_reads_every_template():
    assert len(TEMPLATES) > 20


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: str(path.relative_to(ROOT / "templates")))
def test_template_shows_no_requirement_code(template):
    lines = template.read_text(encoding="utf-8").splitlines()
    assert [(number, code) for number, line in enumerate(lines, 1) for code in USER_CODE.findall(line)] == []


def describe(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every ``description`` and ``summary`` of the API document, with where it sits."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "summary") and isinstance(value, str):
                yield f"{where}/{key}", value
            else:
                yield from describe(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from describe(value, f"{where}/{index}")


def test_the_api_document_describes_without_requirement_codes():
    texts = list(describe(openapi_schema()))
    assert len(texts) > 50
    assert [(where, code) for where, text in texts for code in USER_CODE.findall(text)] == []
