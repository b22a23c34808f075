"""The console's pages: thin views that parse input, call one selector and render.

One module per screen (``home``, ``events``, ``work``, ``config``, ``auth``); shared helpers
in ``common``, filter forms in ``forms``.
"""
