// Console behaviour that the Content-Security-Policy keeps out of the pages (no inline script,
// no hx-on handlers): loaded once from base.html.

// A control's refusal (409: the record changed meanwhile; 400: bad input) is a page fragment
// saying why: swap it in like a success. Which statuses: data-swap-statuses="409 400" on the
// requesting element or an ancestor, else on the swap target or an ancestor. htmx fires
// beforeSwap on the swap target, which is not the control's ancestor when the control targets
// its row or section ("closest tr", "#event-route"): the control is found in the request.
function swapStatusesHolder(event) {
  for (const element of [event.detail.requestConfig?.elt, event.target]) {
    const holder = element instanceof Element ? element.closest("[data-swap-statuses]") : null;
    if (holder) {
      return holder;
    }
  }
  return null;
}

document.addEventListener("htmx:beforeSwap", (event) => {
  const holder = swapStatusesHolder(event);
  if (!holder) {
    return;
  }
  const statuses = holder.dataset.swapStatuses.split(/\s+/);
  if (statuses.includes(String(event.detail.xhr.status))) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// Timestamps: every <time datetime> (the timetag filter, conduit_site/console/templatetags/console_time.py)
// comes as UTC; show it in the browser's time zone, naming the zone, to the second. One marked
// data-ago shows its age instead ("3 min ago", or "in 4 s" for a next try), the local time in
// its title, and ages on every second (a backoff counts down; data-countdown reads "now" at 0).
const LOCAL_TIME = new Intl.DateTimeFormat("en-US", {
  year: "numeric",
  month: "2-digit",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  hourCycle: "h23",
  timeZoneName: "short",
});

function localTime(date) {
  const part = {};
  for (const { type, value } of LOCAL_TIME.formatToParts(date)) {
    part[type] = value;
  }
  return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} ${part.timeZoneName}`;
}

function age(date, now) {
  const seconds = Math.round((now - date) / 1000);
  const future = seconds < 0;
  const span = Math.abs(seconds);
  let words;
  if (span < 120) {
    words = `${span} s`;
  } else if (span < 120 * 60) {
    words = `${Math.floor(span / 60)} min`;
  } else if (span < 48 * 3600) {
    words = `${Math.floor(span / 3600)} h`;
  } else {
    words = `${Math.floor(span / 86400)} d`;
  }
  return future ? `in ${words}` : `${words} ago`;
}

function showTime(element, now) {
  const date = new Date(element.dateTime);
  if (Number.isNaN(date.getTime())) {
    return;
  }
  const local = localTime(date);
  let text = element.hasAttribute("data-ago") ? age(date, now) : local;
  // A countdown (a backoff's next try) that has run out says so, not "2 s ago".
  if (element.hasAttribute("data-countdown") && Math.round((date - now) / 1000) <= 0) {
    text = "now";
  }
  if (element.textContent !== text) {
    element.textContent = text;
  }
  if (element.title !== local) {
    element.title = local;
  }
}

function showTimes(root) {
  const now = Date.now();
  if (root instanceof Element && root.matches("time[datetime]")) {
    showTime(root, now);
  }
  for (const element of root.querySelectorAll("time[datetime]")) {
    showTime(element, now);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  showTimes(document);
  // Fragments swapped in later (htmx, the live websocket) carry UTC times too.
  new MutationObserver((mutations) => {
    for (const mutation of mutations) {
      for (const node of mutation.addedNodes) {
        if (node instanceof Element) {
          showTimes(node);
        }
      }
    }
  }).observe(document.body, { childList: true, subtree: true });
  setInterval(() => {
    const now = Date.now();
    for (const element of document.querySelectorAll("time[data-ago]")) {
      showTime(element, now);
    }
  }, 1000);
});

// Focus after a swap. A control that an htmx swap replaces (Skip, Reroute, Refresh, a row's
// control, a live update over the websocket) takes the keyboard focus with it, and the browser
// drops it to <body>: the next Tab starts again at the top of the page. Instead, focus goes to
// the same control in the new content (same id, or the same request or link), else to the
// message the swap brought (role=alert or status), else to the nearest surviving region that
// held the control. What was focused is remembered with the ids of its ancestors.
const CONTROLS = "a[href], button, input, select, textarea, summary, [tabindex]";

function controlKey(element) {
  for (const name of ["hx-post", "hx-get", "href", "name"]) {
    const value = element.getAttribute(name);
    if (value) {
      return `${name}=${value}`;
    }
  }
  return null;
}

let lastFocus = null;

document.addEventListener("focusin", (event) => {
  const element = event.target;
  if (!(element instanceof Element)) {
    return;
  }
  const regions = [];
  for (let node = element.parentElement; node; node = node.parentElement) {
    if (node.id) {
      regions.push(node.id);
    }
  }
  lastFocus = { element, id: element.id, key: controlKey(element), regions };
});

function focusWithin(target) {
  if (!target.matches(CONTROLS)) {
    target.setAttribute("tabindex", "-1");
  }
  target.focus();
}

function restoreFocus() {
  const lost = lastFocus;
  if (!lost || lost.element.isConnected) {
    return;
  }
  const active = document.activeElement;
  if (active && active !== document.body) {
    return;
  }
  const regions = lost.regions.map((id) => document.getElementById(id)).filter(Boolean);
  const same = lost.id ? document.getElementById(lost.id) : null;
  if (same) {
    focusWithin(same);
    return;
  }
  for (const region of regions) {
    const control = lost.key && [...region.querySelectorAll(CONTROLS)].find((c) => controlKey(c) === lost.key);
    if (control) {
      focusWithin(control);
      return;
    }
  }
  for (const region of regions) {
    const message = region.querySelector('[role="alert"], [role="status"]');
    if (message) {
      focusWithin(message);
      return;
    }
  }
  const holder = regions.find((region) => region.textContent.trim() !== "");
  if (holder) {
    focusWithin(holder);
  }
}

document.addEventListener("htmx:afterSettle", restoreFocus);
document.addEventListener("htmx:oobAfterSwap", restoreFocus);

// A live update of a list (the Work list's rows over the websocket) must not undo what the
// operator is doing there: the boxes ticked for a bulk action stay ticked in the new rows.
let tickedBeforeSwap = null;

document.addEventListener("htmx:oobBeforeSwap", (event) => {
  const target = event.detail.target;
  if (target instanceof Element && target.id === "work-rows") {
    tickedBeforeSwap = new Set(
      [...target.querySelectorAll("input[type=checkbox]:checked")].map((box) => box.id || `${box.name}=${box.value}`),
    );
  }
});

document.addEventListener("htmx:oobAfterSwap", () => {
  const ticked = tickedBeforeSwap;
  tickedBeforeSwap = null;
  const rows = document.getElementById("work-rows");
  if (!ticked || !rows) {
    return;
  }
  for (const box of rows.querySelectorAll("input[type=checkbox]")) {
    if (ticked.has(box.id || `${box.name}=${box.value}`)) {
      box.checked = true;
    }
  }
});
// A table wider than a narrow screen scrolls sideways in its .table-wrap. When nothing inside
// can take the keyboard focus, the wrap takes it (a labelled region), so the keyboard can scroll
// it too; on load, after a swap and when the window is resized.
const FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";

function scrollableTables(root) {
  const scope = root instanceof Element || root instanceof Document ? root : document;
  for (const wrap of scope.querySelectorAll(".table-wrap")) {
    const scrolls = wrap.scrollWidth > wrap.clientWidth + 1;
    if (scrolls && !wrap.hasAttribute("tabindex") && !wrap.querySelector(FOCUSABLE)) {
      const caption = wrap.querySelector("caption");
      const heading = wrap.closest("section")?.querySelector("h2, h3");
      wrap.setAttribute("tabindex", "0");
      wrap.setAttribute("role", "region");
      wrap.setAttribute("aria-label", (caption || heading)?.textContent.trim() || "Table");
    }
  }
}

document.addEventListener("DOMContentLoaded", () => scrollableTables(document));
document.addEventListener("htmx:afterSettle", () => scrollableTables(document));
window.addEventListener("resize", () => scrollableTables(document));
