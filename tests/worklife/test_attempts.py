"""Attempts and their leases (worklife.attempts): one live attempt a Work (W1)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from tests.worklife.factories import AttemptFactory, WorkFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_w1_the_database_forbids_two_live_attempts_of_one_work():
    work = WorkFactory()
    AttemptFactory(work=work, number=1, state="running")
    with pytest.raises(IntegrityError), transaction.atomic():
        AttemptFactory(work=work, number=2, state="waiting")
    AttemptFactory(work=work, number=3, state="failed")  # ended attempts are history
