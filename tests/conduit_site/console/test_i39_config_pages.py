"""The configuration pages after Apply (issue 39 item 10a): the address is the applied
generation's page, and the candidate's old address leads there instead of a 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.config.selectors import live_generation
from tests.routing.factories import CHANGED, apply_config, user_with_role

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(client):
    client.force_login(user_with_role("admin", username="ada"))
    return client


def test_apply_leads_to_the_generation_and_the_candidate_address_follows_it(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    page = reverse("candidate-detail", args=[candidate.pk])
    assert admin.get(page).status_code == 200

    applied = admin.post(
        reverse("candidate-apply", args=[candidate.pk]),
        {"expected_live": "1"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="candidate-actions",
    )

    generation = live_generation()
    url = f"/config/?generation={generation.number}#document"
    assert applied["HX-Redirect"] == url
    shown = admin.get(url)
    assert (
        shown.status_code == 200
        and f"Live document: generation {generation.number}" in shown.content.decode()
    )
    # Reloading (or going back to) the candidate's address: the generation it became.
    again = admin.get(page)
    assert (again.status_code, again["Location"]) == (302, url)


def test_a_discarded_candidates_address_is_still_not_found(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    admin.post(reverse("candidate-discard", args=[candidate.pk]))
    # Another candidate applied meanwhile does not claim the discarded one's address.
    other = apply_config(CHANGED + "\n# other\n", candidate=True)
    admin.post(reverse("candidate-apply", args=[other.pk]))

    assert admin.get(reverse("candidate-detail", args=[candidate.pk])).status_code == 404
