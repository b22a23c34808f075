"""The causal pages of the console: a root's tree, limits and tokens, and the refusals list
(R52, R53, R55)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from causal.limits import Causal, CausalRefused, Limits
from causal.selectors import DiagnosticFilter, ListTotal, diagnostics_total
from conduit_site.console.views import causal as causal_views
from tests.causal.factories import CausalDiagnosticFactory, EventFactory
from tests.causal.support import SECRET, envelope
from tests.conduit_site.console.views.consolekit import HTMX, newest_and_oldest, text

pytestmark = pytest.mark.django_db


@pytest.fixture
def page_clock(clock, monkeypatch):
    """The pages read "the current minute" from the same fake clock the derivations use."""
    monkeypatch.setattr(causal_views, "clock", clock)
    return clock


@pytest.fixture
def family(page_clock):
    """A root with two children, a grandchild and a great-grandchild: all 4 tokens used, one rate refusal."""
    causal = Causal(page_clock, Limits(max_depth=5, rate_per_minute=4))
    root = EventFactory(type="test.root", data={"token": SECRET})
    first = causal.derive(parent=root, envelope=envelope("first")).event
    second = causal.derive(parent=root, envelope=envelope("second")).event
    grandchild = causal.derive(parent=first, envelope=envelope("grandchild")).event
    causal.derive(parent=grandchild, envelope=envelope("fourth"))
    with pytest.raises(CausalRefused):
        causal.derive(parent=second, envelope=envelope("refused"))
    return {"root": root, "first": first, "second": second, "grandchild": grandchild}


def rows(body: str) -> int:
    """How many diagnostic rows a page shows."""
    return len(re.findall(r'<tr id="diagnostic-\d+"', body))


@pytest.mark.parametrize(("name", "args"), [("causal-root", [1]), ("causal-diagnostics", [])])
def test_d4_causal_pages_require_sign_in(client, name, args):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_r53_root_page_shows_the_tree_depths_tokens_and_refusals(console, family):
    root = family["root"]
    response = console.get(reverse("causal-root", args=[root.seq]))
    body = text(response)
    assert response.status_code == 200
    # Tree order: a child's descendants come before its next sibling.
    order = [body.index(f'id="event-{family[name].seq}"') for name in ("first", "grandchild", "second")]
    assert order == sorted(order)
    assert body.index(f'id="event-{root.seq}"') < order[0]
    assert f'id="event-{family["grandchild"].seq}" aria-level="3"' in body
    assert '4 of 4 used in <time datetime="2026-01-05T12:00:00Z">2026-01-05 12:00:00 UTC</time>' in body
    assert (
        "depth 5, 4 derived Events a minute" in body
        and 'pinned <time datetime="2026-01-05T12:00:00Z">2026-01-05 12:00:00 UTC</time>' in body
    )
    assert "rate exceeded" in body
    assert SECRET not in body


def test_r53_root_page_of_an_unpinned_root_says_so(console, page_clock):
    root = EventFactory()
    body = text(console.get(reverse("causal-root", args=[root.seq])))
    assert "not pinned yet" in body and "0 of 128 used" in body and "No refusals under this root" in body


def test_r52_the_tokens_partial_alone_for_htmx(console, family, page_clock):
    root = family["root"]
    page_clock.set(datetime(2026, 1, 5, 12, 1, 0, tzinfo=UTC))  # a new minute: capacity restored
    response = console.get(reverse("causal-root", args=[root.seq]), **HTMX, HTTP_HX_TARGET="causal-limits")
    body = text(response)
    assert body.lstrip().startswith('<section id="causal-limits"')
    assert '0 of 4 used in <time datetime="2026-01-05T12:01:00Z">2026-01-05 12:01:00 UTC</time>' in body
    assert "<html" not in body and "causal-tree" not in body


def test_r53_a_descendants_page_redirects_to_its_root(console, family):
    grandchild = family["grandchild"]
    response = console.get(reverse("causal-root", args=[grandchild.seq]))
    assert response.status_code == 302
    assert (
        response["Location"] == reverse("causal-root", args=[family["root"].seq]) + f"#event-{grandchild.seq}"
    )


def test_r53_unknown_root_is_404(console):
    assert console.get(reverse("causal-root", args=[999999])).status_code == 404


def test_r53_root_page_query_count_does_not_grow_with_history(
    console, page_clock, django_assert_max_num_queries
):
    causal = Causal(page_clock, Limits(max_depth=32, rate_per_minute=1000))
    root = EventFactory()
    parent = root
    for i in range(30):
        parent = causal.derive(parent=parent if i % 2 else root, envelope=envelope(f"e{i}")).event
    CausalDiagnosticFactory.create_batch(30, root_seq=root.seq)
    # Session, user, tree (root, descendants, count), limits, diagnostics, the heartbeat banner.
    with django_assert_max_num_queries(9):
        assert console.get(reverse("causal-root", args=[root.seq])).status_code == 200


def test_r55_diagnostics_list_filters_by_kind_and_root_and_pages(console):
    CausalDiagnosticFactory.create_batch(3, kind="rate_exceeded", root_seq=7, limit=128, count=128)
    CausalDiagnosticFactory(kind="depth_exceeded", root_seq=8)
    body = text(console.get(reverse("causal-diagnostics"), {"kind": "rate_exceeded"}))
    assert rows(body) == 3
    body = text(console.get(reverse("causal-diagnostics"), {"root": "8"}))
    assert rows(body) == 1 and "depth exceeded" in body
    CausalDiagnosticFactory.create_batch(55, kind="missing_parent", root_seq=None)
    first = text(console.get(reverse("causal-diagnostics")))
    assert rows(first) == 50 and 'rel="next"' in first


def test_r55_diagnostics_list_rejects_bad_filters_naming_the_field(console):
    response = console.get(reverse("causal-diagnostics"), {"kind": "nonsense", "root": "x"})
    body = text(response)
    assert response.status_code == 400
    assert "kind:" in body and "root:" in body


def test_r55_diagnostics_partial_for_htmx(console):
    CausalDiagnosticFactory()
    response = console.get(reverse("causal-diagnostics"), **HTMX, HTTP_HX_TARGET="diagnostic-list")
    assert text(response).lstrip().startswith('<section id="diagnostic-list"')
    assert "HX-Request" in response["Vary"]


def test_a_record_shows_how_many_refusals_it_counts(console, page_clock):
    refusing = Causal(page_clock, Limits(max_depth=5, rate_per_minute=0))
    root = EventFactory(type="test.root")
    for i in range(40):
        with pytest.raises(CausalRefused):
            refusing.derive(parent=root, envelope=envelope(f"r{i}"))
    body = text(console.get(reverse("causal-diagnostics")))
    assert rows(body) == 1
    assert '<span class="times">40</span>' in body and "40 refusals</span>" in body
    root_page = text(console.get(reverse("causal-root", args=[root.seq])))
    assert rows(root_page) == 1 and '<span class="times">40</span>' in root_page


# --- totals, paging both ways and the CLI's own filters -------------------------------------------


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_causal_refusals_show_their_total_and_jump_to_the_oldest(operator_console):
    ids = [d.pk for d in CausalDiagnosticFactory.create_batch(55, kind="rate_exceeded", root_seq=7)]
    CausalDiagnosticFactory(kind="depth_exceeded", root_seq=8)
    newest_and_oldest(
        operator_console, "causal-diagnostics", "diagnostic", ids, "refusals", {"kind": "rate_exceeded"}
    )
    assert diagnostics_total(DiagnosticFilter(root_seq=7), cap=50) == ListTotal(50, capped=True)
    assert diagnostics_total(DiagnosticFilter(root_seq=8)) == ListTotal(1, capped=False)
