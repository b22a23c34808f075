"""The console's Work control forms: creating a Work and rebinding one suggest the live bindings."""

from __future__ import annotations

import re

import pytest

from tests.routing.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_create_work_and_rebind_suggest_the_live_bindings(client, clock, test_handlers):
    from tests.controls.controlkit import CONTROLS, grant
    from tests.routing.routerkit import apply
    from tests.worklife.factories import WorkFactory

    apply(clock)  # acme: triage, plain, inbox; acme/web redefines triage as a command
    client.force_login(grant(UserFactory(username="operator"), *CONTROLS))

    create = client.get("/work/new/").content.decode()
    assert 'list="binding-options"' in create and 'list="scope-options"' in create
    options = re.search(r'<datalist id="binding-options">(.*?)</datalist>', create, re.S)[1]
    assert re.findall(r'<option value="([^"]+)">', options) == ["inbox", "plain", "triage"]
    assert '<option value="triage">in acme, acme/web</option>' in options
    scopes = re.search(r'<datalist id="scope-options">(.*?)</datalist>', create, re.S)[1]
    assert re.findall(r'<option value="([^"]+)">', scopes) == ["acme", "acme/web"]

    work = WorkFactory(scope="acme/web", binding="triage")
    page = client.get(f"/work/{work.pk}/").content.decode()
    assert 'id="rebind-binding" list="rebind-binding-options"' in page
    rebind = re.search(r'<datalist id="rebind-binding-options">(.*?)</datalist>', page, re.S)[1]
    assert '<option value="triage">command</option>' in rebind
    assert '<option value="plain">command, from acme</option>' in rebind
    assert '<option value="inbox">queue-only, from acme</option>' in rebind
