"""``manage.py work get`` shows what each attempt ended with, as the Work page does."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command

from tests.worklife.factories import T0, AttemptFactory, WorkFactory

pytestmark = pytest.mark.django_db


def work_get(*args: str) -> str:
    out = io.StringIO()
    call_command("work", "get", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def attempts():
    work = WorkFactory()
    failed = AttemptFactory(
        work=work,
        number=1,
        state="failed",
        executor="command",
        ended_at=T0 + timedelta(seconds=3),
        exit_status=2,
        error="attempt 1 failed: exit status 2",
        stdout_tail="fetching\nfetched 3 pages\n",
        stderr_tail="Traceback (most recent call last):\nValueError: page 4 is gone\n",
    )
    done = AttemptFactory(
        work=work,
        number=2,
        state="completed",
        ended_at=T0 + timedelta(seconds=9),
        result={"pages": 3, "summary": {"ok": True}},
    )
    return work, failed, done


def test_work_get_prints_each_attempts_exit_status_error_result_and_output(attempts):
    work, _, _ = attempts
    text = work_get(str(work.pk))
    assert "    exit status 2\n    error: attempt 1 failed: exit status 2\n" in text
    assert "    stdout (tail):\n      fetching\n      fetched 3 pages\n" in text
    assert (
        "    stderr (tail):\n      Traceback (most recent call last):\n      ValueError: page 4 is gone"
        in text
    )
    assert '    result:\n      {\n        "pages": 3,\n        "summary": {\n          "ok": true\n' in text


def test_work_get_json_carries_each_attempts_result_and_output(attempts):
    work, failed, done = attempts
    body = json.loads(work_get(str(work.pk), "--json"))
    by_number = {attempt["number"]: attempt for attempt in body["attempts"]}
    assert by_number[2]["result"] == {"pages": 3, "summary": {"ok": True}}
    assert (
        by_number[1]["stdout_tail"] == failed.stdout_tail
        and by_number[1]["stderr_tail"] == failed.stderr_tail
    )
    assert by_number[1]["error"] == failed.error and by_number[1]["exit_status"] == 2
