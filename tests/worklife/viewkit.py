"""Work views built by hand, for tests of what the engines decide with them."""

from __future__ import annotations

from worklife.views import AttemptView


def attempt(number: int = 1, binding: str = "triage", capabilities=("inject", "interrupt")) -> AttemptView:
    """A running attempt's view: number ``number`` on ``binding``, lease epoch 1."""
    return AttemptView(
        id=100 + number,
        number=number,
        binding=binding,
        capabilities=frozenset(capabilities),
        lease_epoch=1,
        state="running",
    )
