"""Structured log lines carry their fields."""

import logging

from conduit_site.logformat import KeyValueFormatter


def test_fields_are_printed_as_key_values():
    formatter = KeyValueFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("conduit.routing", logging.WARNING, __file__, 1, "route.gave_up", (), None)
    record.__dict__.update(
        {"event": 12, "code": "handler_timeout", "route.refusals": [{"route": "a", "reason": "b"}]}
    )
    line = formatter.format(record)
    assert line.startswith("WARNING route.gave_up ")
    assert 'event=12 code="handler_timeout" route.refusals=[{"route": "a", "reason": "b"}]' in line


def test_a_plain_record_is_unchanged():
    formatter = KeyValueFormatter("%(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("there",), None)
    assert formatter.format(record) == "hello there"
