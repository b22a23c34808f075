"""Pauses (worklife.pauses): a paused scope or binding starts no attempt while its input queues,
says so in the Work's one line, ends on resume or at its ``until``, and one pause per target."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.apps import apps as django_apps

from routing.access.roles import Role, role_groups_ensure
from tests.worklife.enginekit import runner, send, setup, step_until, work_of
from worklife.models import Attempt, AttemptState, PauseKind, WorkInput
from worklife.pauses import PauseError, PauseTarget, pause_create, pause_end
from worklife.selectors import NotRunning, work_runnable, work_why_not_running

BINDING = PauseTarget(PauseKind.BINDING, "t", "noop")


def _steps(loop, n: int = 5) -> None:
    for _ in range(n):
        loop.step()


@pytest.mark.django_db(transaction=True)
def test_a_paused_binding_queues_its_input_and_starts_no_attempt_until_resumed(clock):
    setup(clock)
    pause_create(target=BINDING, paused_by="alice", reason="incident 42", until=None, clock=clock)
    first = send(clock, "noop", "a")
    second = send(clock, "noop", "a")
    work = work_of(first)
    loop = runner(clock)
    try:
        _steps(loop)
        assert not Attempt.objects.filter(work=work).exists()
        assert WorkInput.objects.filter(work=work, state="pending").count() == 2
        assert not work_runnable(now=clock()).filter(pk=work.pk).exists()
        why = work_why_not_running(work, now=clock())
        assert why.reason == NotRunning.PAUSED
        assert why.text.startswith("held: binding 'noop' in t is paused by alice at ")
        assert why.text.endswith(": incident 42")
        pause_end(target=BINDING, ended_by="bob", clock=clock)
        step_until(loop, lambda: Attempt.objects.filter(work=work, state=AttemptState.SUCCEEDED).exists())
    finally:
        loop.shutdown(grace=0)
    # Both inputs went to the one attempt, in acceptance order.
    assert list(WorkInput.objects.filter(work=work).order_by("seq").values_list("event_id", "state")) == [
        (first, "consumed"),
        (second, "consumed"),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_paused_scope_holds_the_work_of_its_bindings_and_a_pause_ends_by_itself_at_until(clock):
    setup(clock)
    pause_create(
        target=PauseTarget(PauseKind.SCOPE, "t"),
        paused_by="alice",
        reason="",
        until=clock() + timedelta(minutes=5),
        clock=clock,
    )
    work = work_of(send(clock, "noop", "b"))
    loop = runner(clock)
    try:
        _steps(loop)
        assert not Attempt.objects.filter(work=work).exists()
        why = work_why_not_running(work, now=clock())
        assert why.reason == NotRunning.PAUSED and why.until == clock() + timedelta(minutes=5)
        clock.advance(301)
        step_until(loop, lambda: Attempt.objects.filter(work=work, state=AttemptState.SUCCEEDED).exists())
    finally:
        loop.shutdown(grace=0)


@pytest.mark.django_db
def test_pausing_a_paused_target_is_refused_and_resuming_an_unpaused_one_too(clock):
    pause_create(target=BINDING, paused_by="alice", reason="", until=None, clock=clock)
    with pytest.raises(PauseError, match="paused already"):
        pause_create(target=BINDING, paused_by="bob", reason="", until=None, clock=clock)
    pause_end(target=BINDING, ended_by="alice", clock=clock)
    with pytest.raises(PauseError, match="not paused"):
        pause_end(target=BINDING, ended_by="alice", clock=clock)
    with pytest.raises(PauseError, match="not in the future"):
        pause_create(target=BINDING, paused_by="alice", reason="", until=clock(), clock=clock)


@pytest.mark.django_db
def test_a_pause_whose_until_passed_makes_way_for_a_new_one(clock):
    pause_create(
        target=BINDING, paused_by="alice", reason="", until=clock() + timedelta(seconds=10), clock=clock
    )
    clock.advance(11)
    again = pause_create(target=BINDING, paused_by="bob", reason="again", until=None, clock=clock)
    assert again.is_active(clock())


@pytest.mark.django_db
def test_upgrading_gives_existing_operator_and_admin_groups_the_pause_permission():
    migration = importlib.import_module("worklife.migrations.0012_pauses_permission")
    groups = role_groups_ensure()
    for role in (Role.OPERATOR, Role.ADMIN, Role.VIEWER):
        groups[role].permissions.remove(*groups[role].permissions.filter(codename="pause_work"))

    migration.grant_pause(django_apps, None)

    holding = {role for role in Role if groups[role].permissions.filter(codename="pause_work").exists()}
    assert holding == {Role.OPERATOR, Role.ADMIN}
