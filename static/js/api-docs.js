// Starts Swagger UI on the API page (templates/routing/api_docs.html) over the schema URL the
// page names: a static file, as the Content-Security-Policy allows no inline script.
document.addEventListener("DOMContentLoaded", () => {
  const holder = document.getElementById("api-docs");
  if (!holder || typeof SwaggerUIBundle !== "function") {
    return;
  }
  SwaggerUIBundle({
    url: holder.dataset.schemaUrl,
    domNode: holder,
    // No request to the public validator: nothing leaves the console.
    validatorUrl: null,
    deepLinking: true,
    tryItOutEnabled: false,
  });
});
