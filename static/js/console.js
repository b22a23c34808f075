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
