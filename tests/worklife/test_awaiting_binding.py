"""A Work whose dispatch is refused (a queue-only binding, one that cannot run) is waiting for a
binding that can run it: not backing off, not retryable by Retry, counted and filtered apart,
logged once rather than at every look again, run at once after a rebind, and pruned once cancelled."""

from __future__ import annotations

import io
import logging
from datetime import timedelta

import pytest
from django.core.management import call_command

from conduit_site.retention import site_prune
from controls.work import work_cancel, work_rebind
from routing.engine.configurations import LiveConfigurations
from tests.routing.routerkit import apply
from tests.worklife.factories import WorkFactory, WorkInputFactory
from worklife.models import Work
from worklife.runner import WorkRunner
from worklife.scheduling import QUEUE_ONLY_RECHECK
from worklife.selectors import (
    AWAITING_BINDING,
    BACKING_OFF,
    NotRunning,
    WorkFilter,
    work_counts,
    work_filtered,
    work_hold,
    work_why_not_running,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def handlers(test_handlers):
    """Routing with the test handlers registered."""


def look(clock) -> WorkRunner:
    """One pass of a real work loop over the live configuration."""
    runner = WorkRunner(clock=clock, configurations=LiveConfigurations(), slots=2, lease_seconds=30)
    runner.step()
    runner.shutdown(grace=0)
    return runner


def queue_only_work(clock) -> Work:
    """A Work on acme's queue-only binding ``inbox`` with input, its dispatch refused by a work loop."""
    apply(clock)
    work = WorkFactory(scope="acme", binding="inbox")
    WorkInputFactory(work=work, binding="inbox")
    look(clock)
    work.refresh_from_db()
    return work


def test_a_work_on_a_queue_only_binding_waits_for_a_binding_and_is_not_backing_off(clock):
    work = queue_only_work(clock)
    assert work.awaiting_binding and work.retry_at == clock() + QUEUE_ONLY_RECHECK
    assert not work.is_backing_off(clock()) and not work.is_backing_off(None)
    assert not work.is_retryable
    assert work_hold(work, now=clock()) is NotRunning.AWAITING_BINDING
    why = work_why_not_running(work, now=clock())
    assert why.reason is NotRunning.QUEUE_ONLY
    assert why.text.startswith("waiting for a binding that can run it: queue-only binding: binding 'inbox'")


def test_work_waiting_for_a_binding_is_counted_and_filtered_apart_from_backing_off(clock):
    work = queue_only_work(clock)
    backing = WorkFactory(scope="acme", failures=1, retry_at=clock() + timedelta(minutes=1))
    counts = work_counts(now=clock())
    assert (counts.awaiting_binding, counts.backing_off, counts.by_status["ready"]) == (1, 1, 0)
    assert counts.by_state[AWAITING_BINDING] == 1
    assert list(work_filtered(WorkFilter(status=AWAITING_BINDING), now=clock())) == [work]
    assert list(work_filtered(WorkFilter(status=BACKING_OFF), now=clock())) == [backing]
    assert not work_filtered(WorkFilter(status="ready"), now=clock()).exists()


def test_a_refused_dispatch_is_logged_once_not_at_every_look_again(clock, caplog):
    caplog.set_level(logging.INFO, logger="conduit")
    work = queue_only_work(clock)
    for _ in range(3):
        clock.advance(seconds=QUEUE_ONLY_RECHECK.total_seconds() + 1)
        assert look(clock).counters.refused == 1  # looked at again, refused again
    refusals = [r for r in caplog.records if r.getMessage() == "work.dispatch_refused"]
    assert [r.work for r in refusals] == [work.pk]
    work.refresh_from_db()
    assert work.awaiting_binding and work.retry_at == clock() + QUEUE_ONLY_RECHECK


def test_work_get_says_a_work_waits_for_a_binding_not_that_it_backs_off(clock):
    work = queue_only_work(clock)
    out = io.StringIO()
    call_command("work", "get", str(work.pk), stdout=out)
    text = out.getvalue()
    assert "(waiting for a binding that can run it)" in text
    assert "waiting for a binding that can run it (rebind it" in text
    assert "backing off" not in text


def test_a_rebind_lets_a_work_waiting_for_a_binding_be_claimed_at_once(clock):
    work = queue_only_work(clock)
    work_rebind(work_id=work.pk, binding="triage", user="ops", clock=clock)
    work.refresh_from_db()
    assert (work.awaiting_binding, work.retry_at) == (False, None)


def test_a_work_waiting_for_a_binding_is_pruned_once_cancelled(clock):
    work = queue_only_work(clock)
    work_cancel(work_id=work.pk, user="ops", clock=clock)
    clock.advance(days=31)
    counts = site_prune(clock=clock, days=30)
    assert counts.rows["work"] == 1
    assert not Work.objects.filter(pk=work.pk).exists()


def test_the_home_page_counts_work_waiting_for_a_binding_apart_from_backing_off(clock, client):
    from django.urls import reverse

    from tests.routing.factories import UserFactory

    queue_only_work(clock)
    client.force_login(UserFactory(is_superuser=True))
    body = client.get(reverse("console-home")).content.decode()
    waiting = body.index("?status=awaiting_binding")
    assert "waiting for a binding" in body[waiting : waiting + 200]
    assert '<span class="num">1</span>' in body[waiting : waiting + 250]
    backing = body.index("?status=backing_off")
    assert '<span class="num">0</span>' in body[backing : backing + 250]
