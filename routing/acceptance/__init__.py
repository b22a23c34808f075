"""Acceptance: offered Events parsed and checked (``envelopes``), an accepted Event's raw
envelope (``raw``), and the accept services that commit them (``services``)."""
