"""Shared by the console page tests: request headers, the operator's password, and helpers that
read a page's parts, rows and query counts."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

HTMX = {"HTTP_HX_REQUEST": "true"}


CAP_T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def count_queries(client, url, params=None) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {})
    assert response.status_code == 200
    return len(queries)


def htmx(target: str) -> dict[str, str]:
    return {**HTMX, "HTTP_HX_TARGET": target}


def part(body: str, tag: str, element_id: str) -> str:
    """The element ``<tag id="element_id" …>…</tag>`` of ``body`` (first one, not nested)."""
    match = re.search(rf'<{tag} id="{element_id}"[^>]*>(.*?)</{tag}>', body, re.S)
    assert match, f"no {tag}#{element_id} in {body[:3000]}"
    return match.group(0)


def row_seqs(body: str, prefix: str = "event") -> list[int]:
    return [int(s) for s in re.findall(rf'<tr id="{prefix}-(\d+)"', body)]


def text(response) -> str:
    return response.content.decode()


def newest_and_oldest(operator_console, url_name: str, prefix: str, keys: list[int], noun: str, params=None):
    """The list at ``url_name`` counts ``keys`` (ascending), shows them newest first, jumps to
    the oldest page and pages on from there, newer each page."""
    params = params or {}
    url = reverse(url_name)
    newest = text(operator_console.get(url, params))
    assert f"{len(keys)} {noun}</span>" in newest
    assert row_seqs(newest, prefix) == keys[::-1][:50]
    oldest_link = re.search(r'<a href="([^"]+)"[^>]*>Oldest ⇥</a>', newest).group(1).replace("&amp;", "&")
    oldest = text(operator_console.get(oldest_link))
    assert row_seqs(oldest, prefix) == keys[:50]
    assert f"{len(keys)} {noun}, oldest first" in oldest and "Oldest ⇥" not in oldest and "← Newest" in oldest
    newer = re.search(r'<a href="([^"]+)"[^>]*rel="next">Newer', oldest).group(1).replace("&amp;", "&")
    assert row_seqs(text(operator_console.get(newer)), prefix) == keys[50:100]
    mixed = operator_console.get(url, {**params, "before": keys[10], "oldest": "1"})
    assert mixed.status_code == 400 and "pages a newest-first list" in text(mixed)
