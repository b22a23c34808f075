"""The operator console: a Django app (label ``console``) holding the console's pages.

``views/`` has one module per screen, ``urls.py`` their routes, ``consumers.py`` the websocket
live updates, ``templatetags/`` the console's template tags and ``login_guard.py`` the sign-in
throttling handler. The pages are thin: they parse input, call the domain apps' selectors and
services (``routing``, ``worklife``, ``causal``) and render the templates in ``templates/``.
"""
