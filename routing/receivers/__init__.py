"""Receivers: real senders' webhooks turned into Events (``POST /hooks/<receiver name>``).

A receiver is declared in the configuration document (``receivers:``, by name) with its kind,
the scope its Events go to, and its secret by reference (an environment variable or a file,
never the secret itself). A delivery is checked the way its sender signs it, then mapped to a
structured-mode CloudEvent deterministically, then accepted like any other Event
(``routing.acceptance.services``), recorded as accepted by ``receiver:<name>``.

One idea per module: the declaration itself (a receiver's name, kind, scope, secret and
templates, checked) is the configuration's, :mod:`~routing.config.receivers`; here
:mod:`~routing.receivers.spec` (what every kind is made of), :mod:`~routing.receivers.verify` (a
delivery, refusals, reading secrets and the constant-time checks),
:mod:`~routing.receivers.mapping` (bodies, templates rendered, the CloudEvent built), one module
a kind (:mod:`~routing.receivers.github`, :mod:`~routing.receivers.slack`,
:mod:`~routing.receivers.alertmanager`, :mod:`~routing.receivers.cloudevents`,
:mod:`~routing.receivers.generic_hmac`), :mod:`~routing.receivers.kinds` (the kinds by name),
:mod:`~routing.receivers.selectors` and :mod:`~routing.receivers.services`. The package imports
none of them.
"""
