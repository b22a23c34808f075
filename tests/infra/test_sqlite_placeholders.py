"""The SQLite backend turns Django's ``%s`` placeholders into SQLite's ``?``
as Django's own backend does (``infra.sqlite_backend``), remembering each statement's
conversion, and without a regular expression when the statement holds no escaped ``%``."""

from __future__ import annotations

import pytest
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX

from infra.sqlite_backend.base import qmark_style

STATEMENTS = [
    "SELECT 1",
    "SELECT a FROM t WHERE b = %s",
    "INSERT INTO t (a, b) VALUES (%s, %s), (%s, %s), (%s, %s)",
    "SELECT a FROM t WHERE b LIKE '%%x%%' AND c = %s",
    "SELECT '%%s', %s",
    "SELECT '100%%' || %s",
    "SELECT '%d', %s",
    "SELECT %s%s",
    "SELECT '%%%s'",
]


@pytest.mark.parametrize("statement", STATEMENTS)
def test_placeholders_convert_as_djangos_sqlite_backend_converts_them(statement):
    assert qmark_style(statement) == FORMAT_QMARK_REGEX.sub("?", statement).replace("%%", "%")


def test_a_window_statement_converts_every_placeholder():
    rows = ", ".join(["(%s, %s, %s)"] * 500)
    converted = qmark_style(f"INSERT INTO t (a, b, c) VALUES {rows}")
    assert converted.count("?") == 1500
    assert "%" not in converted
