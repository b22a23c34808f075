"""A count with its noun in the right number."""

from __future__ import annotations

import pytest

from causal.selectors import ListTotal
from infra.words import counted


@pytest.mark.parametrize(
    ("count", "noun", "said"),
    [
        (1, "Events", "1 Event"),
        (0, "Events", "0 Events"),
        (2, "dead letters", "2 dead letters"),
        (1, "dead letters", "1 dead letter"),
        (1, "pass,passes", "1 pass"),
        (3, "pass,passes", "3 passes"),
        (1, "Work", "1 Work"),
        (12000, "Events", "12,000 Events"),
        (ListTotal(count=1, capped=False), "Events", "1 Event"),
        (ListTotal(count=10_000, capped=True), "Events", "10,000+ Events"),
    ],
)
def test_a_count_takes_its_noun_in_the_right_number(count, noun, said):
    assert counted(count, noun) == said
