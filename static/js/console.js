// Console behaviour that the Content-Security-Policy keeps out of the pages (no inline script,
// no hx-on handlers): loaded once from base.html.

// A control's refusal (409: the record changed meanwhile; 400: bad input) is a page fragment
// saying why: swap it in like a success. Which statuses: data-swap-statuses="409 400" on the
// requesting element or an ancestor.
document.addEventListener("htmx:beforeSwap", (event) => {
  const holder = event.target instanceof Element ? event.target.closest("[data-swap-statuses]") : null;
  if (!holder) {
    return;
  }
  const statuses = holder.dataset.swapStatuses.split(/\s+/);
  if (statuses.includes(String(event.detail.xhr.status))) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});
