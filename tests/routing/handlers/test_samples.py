"""R45: the built-in handler's samples satisfy every condition of their route (``matches``
included), traced through the real trace, or say they cannot."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import re2
from django.core.management import call_command
from hypothesis import given
from hypothesis import strategies as st

from routing.config.services import config_apply
from routing.handlers.samples import regex_example
from routing.setup.trace import samples, trace
from tests.routing.factories import UserFactory

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parents[3] / "demo" / "conduit.yaml"

MATCHES = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: chat
        handler: match
        params:
          type: "slack.message"
          where:
            - {field: data.channel, matches: "^C[A-Z0-9]+$"}
          keys: ["thread:{data.channel}/{subject}"]
        binding: inbox
        policy: queue
      - slot: releases
        handler: match
        params:
          type: "git.tag.*"
          source: "https://git.example/*"
          where:
            - {field: data.ref, exists: true}
            - {field: data.ref, matches: "^refs/tags/v?[0-9]+\\\\.[0-9]+\\\\.[0-9]+$"}
            - {field: data.kind, in: [release, hotfix]}
            - {field: data.kind, matches: "fix$"}
            - {field: subject, matches: "^(main|release/.+)$"}
            - {field: data.draft, equals: false}
            - {field: data.bot, exists: false}
          keys: ["release:{data.ref}"]
        binding: inbox
        policy: queue
      - slot: typed
        handler: match
        params:
          type: "ops.*"
          where:
            - {field: type, matches: "^ops\\\\.(page|alert)\\\\.[a-z]+$"}
            - {field: data.title, matches: "(?i)^\\\\[(urgent|p[0-2])\\\\] \\\\S+"}
            - {field: data.count, matches: "^[^a-z]{3}-\\\\d{2,4}$"}
        binding: inbox
        policy: queue
"""


def scopes_of(document: str) -> list[str]:
    return [line.split("path:")[1].strip() for line in document.splitlines() if "- path:" in line]


@pytest.mark.parametrize("name", ["demo", "matches"])
def test_r45_every_sample_is_matched_by_its_own_route(clock, name):
    document = DEMO.read_text(encoding="utf-8") if name == "demo" else MATCHES
    config_apply(document=document, clock=clock)
    traced = 0
    for scope in scopes_of(document):
        found = samples(scope=scope, clock=clock)
        assert found
        for route, sample in found:
            assert sample.note == "", (scope, route, sample.note)
            result = trace(payload={**sample.event, "scope": scope}, clock=clock)
            own = [v.verdict for v in result.verdicts if v.route == route]
            assert own == ["match"], (scope, route, sample.event, result.verdicts)
            assert result.route == route, (scope, route, result.verdicts)
            traced += 1
    assert traced >= (12 if name == "demo" else 3)


CANNOT = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: contradicts
        handler: match
        params:
          type: "x.*"
          where:
            - {field: data.state, equals: open}
            - {field: data.state, matches: "^closed$"}
        binding: inbox
        policy: queue
      - slot: posix
        handler: match
        params:
          type: "y.*"
          where:
            - {field: data.word, matches: "^[[:digit:]]+$"}
        binding: inbox
        policy: queue
"""


@pytest.mark.filterwarnings("ignore::FutureWarning")  # Python's parser on a POSIX class
def test_r45_a_sample_that_cannot_match_its_route_says_so(clock, client):
    config_apply(document=CANNOT, clock=clock)
    found = dict(samples(scope="acme", clock=clock))
    contradicts, posix = found["contradicts"], found["posix"]
    assert contradicts.note == (
        "this sample does not match route contradicts: data.state is 'open', which does not match /^closed$/; edit it "
        "before tracing"
    )
    assert posix.note == (
        "this sample does not match route posix: no value for data.word matching /^[[:digit:]]+$/ could be "
        "built; data.word is 'sample', which does not match /^[[:digit:]]+$/; edit it before tracing"
    )
    # What the note says is what a trace finds.
    result = trace(payload={**contradicts.event, "scope": "acme"}, clock=clock)
    assert result.route != "contradicts"
    # The command shows the note under the sample.
    out = io.StringIO()
    call_command("trace", "--samples", "acme", stdout=out)
    assert "  note: this sample does not match route contradicts" in out.getvalue()
    out = io.StringIO()
    call_command("trace", "--samples", "acme", "--json", stdout=out)
    assert [s["note"] != "" for s in json.loads(out.getvalue())] == [True, True]
    # And the Trace page, beside the sample's link.
    client.force_login(UserFactory())
    page = client.get("/trace/?scope=acme")
    assert "this sample does not match route contradicts: data.state is &#x27;open&#x27;" in page.text


@pytest.mark.parametrize(
    ("pattern", "example"),
    [
        ("^C[A-Z0-9]+$", "CA"),
        ("^WIP", "WIP"),
        ("^(feat|fix)(\\(.+\\))?: ", "feat: "),
        ("^a$|b", "a"),
        ("^$", ""),
        ("\\d{3}-\\d{4}", "000-0000"),
        ("^[^@\\s]+@[^@\\s]+\\.\\w+$", "a@a.a"),
        ("x^a", None),  # nothing matches
        ("(a)\\1", None),  # a backreference: RE2 has none
    ],
)
def test_r45_regex_example(pattern, example):
    assert regex_example(pattern) == example


# The common subset of patterns: literals (escaped where special), classes, negated classes,
# categories and ``.``, repeated, grouped and alternated, anchored or not.
_ATOMS = st.one_of(
    st.sampled_from(list("abcXYZ019_-/:@ ")).map(lambda c: "\\" + c if c in "-/: " else c),
    st.sampled_from(["\\.", "\\(", "\\[", "\\$", "\\^", "\\\\"]),
    st.sampled_from(["[a-z]", "[A-Z0-9]", "[^a-z]", "[^\\s@]", "[._-]", "\\d", "\\w", "\\s", "\\S", "."]),
)
_QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "+?"])


def _patterns():
    def extend(children):
        sequence = st.lists(children, min_size=1, max_size=4).map("".join)
        return st.one_of(
            st.tuples(sequence, _QUANTIFIERS).map(lambda t: f"({t[0]}){t[1]}"),
            st.tuples(sequence, _QUANTIFIERS).map(lambda t: f"(?:{t[0]}){t[1]}"),
            st.lists(sequence, min_size=2, max_size=3).map(lambda alts: "(" + "|".join(alts) + ")"),
            sequence,
        )

    quantified = st.tuples(_ATOMS, _QUANTIFIERS).map("".join)
    body = st.recursive(quantified, extend, max_leaves=12)
    return st.tuples(st.sampled_from(["", "^"]), body, st.sampled_from(["", "$"])).map("".join)


@given(_patterns())
def test_r45_every_pattern_of_the_common_subset_gets_an_example(pattern):
    example = regex_example(pattern)
    assert example is not None, pattern
    assert re2.search(pattern, example), (pattern, example)
