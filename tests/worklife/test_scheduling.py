"""Claims (worklife.scheduling): which Work runs next, and the one retry rule the retry write
and the console share."""

from __future__ import annotations

import pytest
from django.db import transaction

from tests.worklife.factories import RETRY_CASES, WorkFactory
from worklife.errors import WorkError
from worklife.scheduling import work_retry_in_tx

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("case", "fields", "retryable"), RETRY_CASES, ids=[c[0] for c in RETRY_CASES])
def test_the_retry_write_takes_exactly_the_work_the_retry_rule_calls_retryable(
    clock, case, fields, retryable
):
    work = WorkFactory(**fields)
    assert work.is_retryable is retryable
    with transaction.atomic():
        if not retryable:
            with pytest.raises(WorkError):
                work_retry_in_tx(work_id=work.pk, now=clock())
            return
        retried = work_retry_in_tx(work_id=work.pk, now=clock())
    assert (retried.parked_at, retried.retry_at, retried.failures) == (None, None, 0)
    assert not retried.is_retryable  # nothing left to retry: it runs at once
