// Starts Swagger UI on the API page (templates/routing/api_docs.html) over the schema URL the
// page names: a static file, as the Content-Security-Policy allows no inline script.
document.addEventListener("DOMContentLoaded", () => {
  const holder = document.getElementById("api-docs");
  if (!holder || typeof SwaggerUIBundle !== "function") {
    return;
  }
  // Swagger UI renders examples and schemas in scrollable <pre> blocks as operations open: each
  // gets a tab stop and a name, so a keyboard can reach and scroll it.
  new MutationObserver(() => {
    for (const block of holder.querySelectorAll("pre:not([tabindex])")) {
      block.setAttribute("tabindex", "0");
      block.setAttribute("role", "region");
      block.setAttribute("aria-label", block.classList.contains("example") ? "Example" : "Code");
    }
    // A parameter whose values are a list is a <select> with no label: it is named after its
    // parameter.
    for (const select of holder.querySelectorAll("select:not([aria-label])")) {
      const row = select.closest("tr[data-param-name]");
      if (row) {
        select.setAttribute("aria-label", row.dataset.paramName);
      }
    }
  }).observe(holder, { childList: true, subtree: true });
  SwaggerUIBundle({
    url: holder.dataset.schemaUrl,
    domNode: holder,
    // No request to the public validator: nothing leaves the console.
    validatorUrl: null,
    // Deep links would put a link inside each operation's toggle button (nested controls).
    deepLinking: false,
    tryItOutEnabled: false,
    onComplete: () => {
      // Swagger UI's server picker has a visible caption but no label tied to it.
      const servers = holder.querySelector("select#servers");
      if (servers && !servers.hasAttribute("aria-label")) {
        servers.setAttribute("aria-label", "Server");
      }
    },
  });
});
