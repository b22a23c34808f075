"""The calls an attempt makes, refused where they must be: a child or a successor on a binding its
scope lacks is refused at the call and creates nothing. Python workers and commands run by a real
work loop, Events accepted and routed by the real router."""

from __future__ import annotations

import pytest

from causal.models import Event
from tests.routing.routerkit import apply
from tests.worklife.callkit import document, result, send, work_of
from tests.worklife.enginekit import status, step_until
from worklife.models import Work

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def configured(clock, test_handlers):
    apply(clock, document())


def test_a_child_on_a_binding_its_scope_lacks_is_refused_at_the_call(clock, loop):
    py = work_of(send(clock, "t.py_child", key="pc"))
    cmd = work_of(send(clock, "t.cmd_child", key="cc"))
    step_until(loop, lambda: status(py) == "completed" and status(cmd) == "completed")
    assert result(py)["refused"].startswith("child refused: binding 'nope' is not in scope t")
    reply = result(cmd)
    assert not reply["ok"] and reply["error"].startswith("child refused: binding 'nope' is not in scope t")
    assert set(Work.objects.values_list("pk", flat=True)) == {py.pk, cmd.pk}  # nothing created
    assert not Event.objects.filter(type="core.work.created").exists()
    # A binding the scope has still makes a child.
    ok = work_of(send(clock, "t.py_child_ok", key="ok"))
    step_until(loop, lambda: status(ok) == "completed")
    child = Work.objects.get(pk=result(ok)["child"])
    assert (child.parent_id, child.binding, child.scope) == (ok.pk, "inbox", "t")


def test_a_successor_on_a_binding_its_scope_lacks_is_refused_at_the_call(clock, loop):
    here = work_of(send(clock, "t.cmd_successor", key="s1"))
    there = work_of(send(clock, "t.cmd_successor_elsewhere", key="s2"))
    step_until(loop, lambda: status(here) == "completed" and status(there) == "completed")
    assert result(here)["error"].startswith("successor refused: binding 'nope' is not in scope t")
    assert result(there)["error"].startswith("successor refused: binding 'inbox' is not in scope ci")
    assert set(Work.objects.values_list("pk", flat=True)) == {here.pk, there.pk}  # nothing created
