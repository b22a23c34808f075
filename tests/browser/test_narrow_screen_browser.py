"""The console at 400 px: the navigation is one short row, and every table keeps every column,
reachable by scrolling the table sideways, on every page; axe still finds no serious violation
there."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.browser.browserkit import PAGES, serious, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# For each column header: whether it is shown and reachable, the page itself not wider than
# the window (a table scrolls inside its .table-wrap instead).
HEADERS = """() => [...document.querySelectorAll("table th")].map((th) => {
  const box = th.getBoundingClientRect();
  const wrap = th.closest(".table-wrap");
  let reachable = box.width > 0 && box.height > 0 && getComputedStyle(th).visibility !== "hidden";
  if (reachable && wrap) {
    const outer = wrap.getBoundingClientRect();
    // From the wrap's padding edge (inside its border), where its scrolling starts; a pixel
    // of rounding either way.
    const right = box.right - (outer.left + wrap.clientLeft) + wrap.scrollLeft;
    reachable = right <= wrap.scrollWidth + 1.5 && getComputedStyle(wrap).overflowX !== "hidden";
  } else if (reachable) {
    reachable = box.right <= document.documentElement.scrollWidth + 1;
  }
  return {text: th.innerText.trim(), reachable, hidden: th.closest(".visually-hidden") !== null};
})"""


def test_at_400_px_the_nav_is_short_and_every_column_is_reachable(live_server, world, browser):
    base = live_server.url
    context = browser.new_context(viewport={"width": 400, "height": 800})
    page = context.new_page()
    sign_in(page, base)
    axe = Axe()
    problems: dict[str, list[str]] = {}
    # The console's pages (the admin's are Django's own layout).
    for item in [item for item in PAGES if not item.url(world).startswith("/admin/")]:
        response = page.goto(base + item.url(world))
        assert response is not None and response.status == 200, item.label
        if item.step:
            item.step(page)
        found = []
        nav = page.evaluate("() => document.querySelector('.site-header').getBoundingClientRect().height")
        if nav >= 120:
            found.append(f"the header is {nav:.0f} px high")
        wide = page.evaluate("() => document.documentElement.scrollWidth")
        if wide > 401:
            found.append(f"the page is {wide} px wide")
        headers = [h for h in page.evaluate(HEADERS) if not h["hidden"]]
        found += [f"column {h['text']!r} cannot be reached" for h in headers if not h["reachable"]]
        found += serious(axe.run(page))
        if found:
            problems[item.label] = found
    context.close()
    assert problems == {}, "\n".join(
        f"{label}: {line}" for label, lines in problems.items() for line in lines
    )
