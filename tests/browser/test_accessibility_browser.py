"""Accessibility in a real browser: axe-core (``axe-playwright-python``) finds
no serious or critical violation on any console page, each filled with data; the skip link,
focus after an htmx swap, and keyboard access to scrollable blocks.

To check a new page, add it to :data:`PAGES`: a label and a function from the ``world`` fixture's
data to the page's URL (and, if the page needs it, a step to run before the check)."""

from __future__ import annotations

from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import reverse

from tests.browser.browserkit import PAGES, serious, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


# Wide, and as narrow as the console is laid out for (tables scroll sideways, lists stack).
@pytest.mark.parametrize("width", [1280, 800])
def test_axe_finds_no_serious_violation_on_any_page(live_server, world, browser, tmp_path, width):
    base = live_server.url
    axe = Axe()
    found: dict[str, list[str]] = {}
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()

    # Signed out: the login page.
    page.goto(base + reverse("login"))
    found["login"] = serious(axe.run(page))
    page.screenshot(path=tmp_path / "login.png", full_page=True)

    sign_in(page, base)
    for item in PAGES:
        response = page.goto(base + item.url(world))
        assert response is not None and response.status == 200, item.label
        if item.step:
            item.step(page)
        found[item.label] = serious(axe.run(page))
        page.screenshot(path=tmp_path / f"{item.label.replace(' ', '-')}.png", full_page=True)
    context.close()
    failing = {label: lines for label, lines in found.items() if lines}
    assert failing == {}, "\n".join(f"{label}: {line}" for label, lines in failing.items() for line in lines)


def active(page) -> dict[str, Any]:
    """What has the keyboard focus: its tag, id, class, text and the ids of its ancestors."""
    return page.evaluate(
        """() => {
          const e = document.activeElement;
          const ids = [];
          for (let n = e.parentElement; n; n = n.parentElement) if (n.id) ids.push(n.id);
          return {tag: e.tagName.toLowerCase(), id: e.id, cls: e.className, text: e.innerText, within: ids};
        }"""
    )


def test_the_skip_link_is_the_first_tab_stop_and_moves_focus_to_the_content(
    live_server, world, browser, tmp_path
):
    base = live_server.url
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, base)
    page.goto(base + reverse("event-list"))
    skip = page.locator("a.skip-link")
    assert skip.bounding_box()["y"] < 0  # out of sight until focused
    page.keyboard.press("Tab")
    assert active(page)["cls"] == "skip-link"
    assert skip.inner_text() == "Skip to content"
    box = skip.bounding_box()
    assert box["y"] >= 0 and box["height"] > 0
    page.screenshot(path=tmp_path / "skip-link.png")
    page.keyboard.press("Enter")
    assert page.url.endswith("#main")
    assert active(page)["id"] == "main"
    # The next Tab goes into the content, past the navigation.
    page.keyboard.press("Tab")
    assert "main" in active(page)["within"]
    context.close()


def test_enter_on_skip_keeps_the_focus_in_the_route_section(live_server, world, browser, tmp_path):
    base = live_server.url
    unrouted = world["unrouted"]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, base)
    page.goto(base + reverse("event-detail", args=[unrouted.seq]))
    page.focus(f"#event-route a[hx-post='{reverse('event-skip', args=[unrouted.seq])}']")
    with page.expect_response(lambda r: r.url.endswith(reverse("event-skip", args=[unrouted.seq]))):
        page.keyboard.press("Enter")
    page.wait_for_selector("#event-control-result .control-result")
    page.wait_for_function("() => document.activeElement !== document.body", timeout=5000)
    focused = active(page)
    # Not <body>: the swap's message (kept beside the Route section, where live updates leave
    # it), or the control in the swapped section.
    assert focused["tag"] != "body"
    in_message = "event-control-result" in [focused["id"], *focused["within"]]
    assert in_message or "event-route" in focused["within"], focused
    assert "skipped" in focused["text"].lower() or "event-route" in focused["within"], focused
    page.screenshot(path=tmp_path / "after-skip.png")
    # The next Tab continues from there, inside the page's content.
    page.keyboard.press("Tab")
    assert "main" in active(page)["within"]
    context.close()


def test_a_refreshed_region_gives_the_focus_back_to_its_control(live_server, world, browser):
    base = live_server.url
    root = world["root"]
    context = browser.new_context()
    page = context.new_page()
    sign_in(page, base)
    page.goto(base + reverse("causal-root", args=[root.seq]))
    page.focus("#causal-limits a:text('Refresh')")
    page.evaluate("document.getElementById('causal-limits').dataset.old = 'yes'")
    with page.expect_response(lambda r: r.request.headers.get("hx-target") == "causal-limits"):
        page.keyboard.press("Enter")
    page.wait_for_function("() => !document.getElementById('causal-limits').dataset.old")
    page.wait_for_function("() => document.activeElement !== document.body", timeout=5000)
    focused = active(page)
    assert (focused["tag"], focused["text"]) == ("a", "Refresh")
    assert "causal-limits" in focused["within"]
    context.close()


def test_scrollable_data_is_reached_and_scrolled_by_keyboard(live_server, world, browser):
    base = live_server.url
    context = browser.new_context(viewport={"width": 800, "height": 900})
    page = context.new_page()
    sign_in(page, base)
    page.goto(base + reverse("event-detail", args=[world["opened"].seq]))
    data = page.locator("#event-data")
    assert data.evaluate("e => e.scrollWidth > e.clientWidth")  # the 400-character body
    assert data.get_attribute("role") == "region" and data.get_attribute("aria-label") == "Event data"
    for _ in range(80):
        page.keyboard.press("Tab")
        if active(page)["id"] == "event-data":
            break
    assert active(page)["id"] == "event-data"
    page.keyboard.press("End")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.getElementById('event-data').scrollLeft > 0")
    context.close()


def lines_of(page, selector: str) -> list[str]:
    """The text of each rendered line of the element ``selector``."""
    return page.evaluate(
        """(selector) => {
          const element = document.querySelector(selector);
          const lines = [];
          let top = null;
          const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (let i = 0; i < node.length; i++) {
              const range = document.createRange();
              range.setStart(node, i);
              range.setEnd(node, i + 1);
              const rect = range.getClientRects()[0];
              if (!rect) continue;
              if (top === null || Math.abs(rect.top - top) > 2) { lines.push(""); top = rect.top; }
              lines[lines.length - 1] += node.data[i];
            }
          }
          return lines;
        }""",
        selector,
    )


def test_long_type_names_wrap_at_dots_not_inside_a_word(live_server, world, browser, tmp_path):
    base = live_server.url
    opened = world["opened"]
    context = browser.new_context(viewport={"width": 420, "height": 900})
    page = context.new_page()
    sign_in(page, base)
    page.goto(base + reverse("event-list"))
    cell = f"#event-{opened.seq} .type-name"
    lines = lines_of(page, cell)
    page.screenshot(path=tmp_path / "type-wrap.png", full_page=True)
    assert "".join(lines) == "github.pull_request.review_comment.created"
    assert len(lines) > 1, lines
    assert all(line.endswith(".") for line in lines[:-1]), lines
    context.close()


# The console's websocket, replaced before the page loads by one the test speaks for: the live
# server of the tests serves no websockets, and the message is the consumer's (an out-of-band
# section), delivered as the htmx ws extension receives it.
FAKE_WEBSOCKET = """
window.__sockets = [];
window.WebSocket = class extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.readyState = 0;
    window.__sockets.push(this);
    setTimeout(() => { this.readyState = 1; this.fire(new Event("open")); }, 0);
  }
  fire(event) { this["on" + event.type]?.(event); this.dispatchEvent(event); }
  deliver(data) { this.fire(new MessageEvent("message", {data})); }
  send() {}
  close() { this.readyState = 3; }
};
Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
"""


def test_a_live_update_keeps_the_focus_on_the_same_link(live_server, world, browser):
    """A websocket message swaps sections out of band: a link focused in a replaced section is
    focused again in its new copy, not dropped to <body>."""
    base = live_server.url
    work, opened = world["work"], world["opened"]
    context = browser.new_context()
    context.add_init_script(FAKE_WEBSOCKET)
    page = context.new_page()
    sign_in(page, base)
    page.goto(base + reverse("work-detail", args=[work.pk]))
    page.wait_for_function("() => window.__sockets.some((s) => s.readyState === 1)")
    link = f"#work-input a[href='{reverse('event-detail', args=[opened.seq])}']"
    page.focus(link)
    page.evaluate(
        """() => {
          const copy = document.getElementById('work-input').cloneNode(true);
          copy.setAttribute('hx-swap-oob', 'true');
          copy.dataset.fresh = 'yes';
          window.__sockets.find((s) => s.readyState === 1).deliver(copy.outerHTML);
        }"""
    )
    page.wait_for_function("() => document.getElementById('work-input').dataset.fresh === 'yes'")
    page.wait_for_function("() => document.activeElement !== document.body", timeout=5000)
    focused = active(page)
    assert focused["tag"] == "a" and focused["text"] == f"#{opened.seq}"
    assert page.evaluate("document.activeElement.closest('#work-input').dataset.fresh") == "yes"
    context.close()
