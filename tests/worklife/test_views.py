"""What the engines read of a Work, and the binding it runs on next (R30)."""

from __future__ import annotations

import pytest

from tests.worklife.viewkit import attempt
from worklife.views import WorkView, addressed_binding

SCOPE = "acme"


# --- R30: the binding an addressed operator Event is queued on --------------------------------


def work_view(**fields) -> WorkView:
    return WorkView(id=7, scope=SCOPE, status="ready", binding="first", **fields)


@pytest.mark.parametrize(
    "fields,expected",
    [
        pytest.param({}, "first", id="the-work's-own"),
        pytest.param({"latest_attempt": attempt(2, "ran")}, "ran", id="latest-attempt"),
        pytest.param(
            {"latest_attempt": attempt(2, "ran"), "rebind_binding": "rebound", "rebind_after_attempt": 2},
            "rebound",
            id="rebind-after-the-latest-attempt",
        ),
        pytest.param(
            {"latest_attempt": attempt(3, "ran"), "rebind_binding": "rebound", "rebind_after_attempt": 2},
            "ran",
            id="an-attempt-newer-than-the-rebind",
        ),
        pytest.param({"rebind_binding": "rebound"}, "rebound", id="rebind-before-any-attempt"),
        pytest.param(
            {
                "latest_attempt": attempt(3, "ran"),
                "rebind_binding": "rebound",
                "rebind_after_attempt": 2,
                "retry_binding": "retry",
            },
            "retry",
            id="retry-state-before-rebind-and-attempt",
        ),
        pytest.param({"retry_binding": "retry"}, "retry", id="retry-state-before-the-work's-own"),
        pytest.param(
            {
                "latest_attempt": attempt(3, "ran"),
                "rebind_binding": "rebound",
                "rebind_after_attempt": 3,
                "retry_binding": "retry",
                "queued_binding": "queued",
            },
            "queued",
            id="queued-input-first",
        ),
        pytest.param({"queued_binding": "queued"}, "queued", id="queued-input-before-the-work's-own"),
    ],
)
def test_r30_addressed_binding_precedence(fields, expected):
    assert addressed_binding(work_view(**fields)) == expected
