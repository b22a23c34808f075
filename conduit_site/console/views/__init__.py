"""The console's pages: thin views that parse input, call one selector and render.

One module per screen (``home``, ``events``, ``work``, ``config``, ``auth``…); shared helpers
in ``common``. The filter forms (``conduit_site.console.forms``) and the home page's charts
(``conduit_site.console.charts``) are the console's, beside the views.
"""
