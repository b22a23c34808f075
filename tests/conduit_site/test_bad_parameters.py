"""Every paging and filter parameter of every page and API answers 400 for a bad value, and an
id no database column can hold is a 404, never a 500."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.routing.factories import UserFactory, api_token_with_secret

pytestmark = pytest.mark.django_db

HUGE = "99999999999999999999999"
BAD_VALUES = [HUGE, "-1", "0", "abc", "1.5", "\u00b2"]  # ² is a digit to str.isdigit, not to int()


@pytest.fixture
def console(client):
    client.force_login(UserFactory(username="admin", is_superuser=True, is_staff=True))
    return client


@pytest.fixture
def auth():
    _, secret = api_token_with_secret(user__username="reader", user__is_superuser=True)
    return {"Authorization": f"Bearer {secret}"}


CONSOLE_PARAMETERS = [
    ("dead-letters", [], "before"),
    ("event-list", [], "before"),
    ("work-list", [], "before"),
    ("config-list", [], "before"),
    ("config-list", [], "generation"),
    ("causal-diagnostics", [], "before"),
    ("causal-diagnostics", [], "root"),
]


@pytest.mark.parametrize("value", BAD_VALUES)
@pytest.mark.parametrize(("name", "args", "parameter"), CONSOLE_PARAMETERS)
def test_console_paging_and_filters_answer_400_for_bad_values(console, name, args, parameter, value):
    response = console.get(reverse(name, args=args), {parameter: value})
    assert response.status_code == 400, (name, parameter, value, response.status_code)


def test_dead_letters_before_past_64_bits_is_400(console):
    assert console.get(f"/dead-letters/?before={HUGE}").status_code == 400


@pytest.mark.parametrize("value", BAD_VALUES)
@pytest.mark.parametrize("parameter", ["input_after", "history_before"])
def test_work_page_paging_answers_400_for_bad_values(console, parameter, value):
    from tests.worklife.factories import WorkFactory

    work = WorkFactory()
    response = console.get(reverse("work-detail", args=[work.pk]), {parameter: value})
    assert response.status_code == 400


@pytest.mark.parametrize("path", [f"/events/{HUGE}/", f"/work/{HUGE}/", f"/causal/{HUGE}/", "/events/0/"])
def test_console_ids_past_64_bits_are_404(console, path):
    assert console.get(path).status_code == 404


def test_trace_sample_that_is_not_an_ascii_number_is_ignored(console):
    assert console.get(reverse("trace"), {"scope": "acme", "sample": "\u00b2"}).status_code == 200


@pytest.mark.parametrize("value", BAD_VALUES)
@pytest.mark.parametrize("parameter", ["before", "limit"])
def test_api_work_list_paging_answers_400_for_bad_values(client, auth, parameter, value):
    response = client.get("/api/work", {parameter: value}, headers=auth)
    assert response.status_code == 400
    assert response.json()["field"] == parameter


@pytest.mark.parametrize(
    "path", [f"/api/events/{HUGE}", f"/api/events/{HUGE}/route", f"/api/work/{HUGE}", "/api/nothing/here"]
)
def test_api_unknown_urls_and_ids_past_64_bits_are_json_404(client, auth, path):
    response = client.get(path, headers=auth)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"] == "not_found"


def test_api_content_length_that_is_not_an_ascii_number_is_not_a_500(client, auth):
    response = client.post(
        "/api/events", data=b"{}", content_type="application/json", headers=auth, CONTENT_LENGTH="\u00b2"
    )
    assert response.status_code < 500


@pytest.mark.parametrize("url", ["/events/", "/work/", "/dead-letters/"])
def test_console_filters_refuse_a_nul_character(console, url):
    assert console.get(url, {"scope": "acme\x00"}).status_code == 400


def test_api_work_filters_answer_400_for_a_nul_character_or_an_unknown_status(client, auth):
    for params, field in [({"scope": "acme\x00"}, "scope"), ({"status": "nope"}, "status")]:
        response = client.get("/api/work", params, headers=auth)
        assert response.status_code == 400, params
        assert response.json()["field"] == field
