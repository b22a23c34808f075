// Select the whole value of an input marked data-select-on-focus when it gets the focus (the API
// token shown once in the admin), without an inline handler the Content-Security-Policy forbids.
document.addEventListener("focusin", (event) => {
  if (event.target instanceof HTMLInputElement && event.target.hasAttribute("data-select-on-focus")) {
    event.target.select();
  }
});
