"""The console's pages: thin views that parse input, call one selector and render.

One module per screen or family of screens, its docstring naming them; helpers the views share
(rendering partials, paging) in ``common``.
"""
