"""Factories for the routing app."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Permission
from django.db import transaction

from routing.access.roles import ACCEPT_EVENT, VIEW_EVENT, Role, role_assign_in_tx
from routing.access.tokens import token_digest, token_generate
from routing.config.services import config_apply, config_candidate
from routing.models import (
    ApiToken,
    Generation,
    GenerationKind,
    ImpactRun,
    ImpactRunChange,
    RateLimitTake,
    ReceiverCount,
    RouteRecord,
    Scope,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


# --- configuration generations and scopes (acceptance tests) --------------------------------


class GenerationFactory(factory.django.DjangoModelFactory):
    """An applied generation (numbered in order); ``kind="candidate", number=None`` for a candidate."""

    class Meta:
        model = Generation

    number = factory.Sequence(lambda n: n + 1)
    kind = GenerationKind.APPLIED
    document = "version: 1\nscopes: []\n"
    digest = factory.LazyAttribute(lambda o: hashlib.sha256(o.document.encode()).hexdigest())
    created_at = T0


class ScopeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Scope

    generation = factory.SubFactory(GenerationFactory)
    path = factory.Sequence(lambda n: f"scope{n}")


def live_scopes(*paths: str) -> Generation:
    """A new live (newest applied) generation holding exactly the scopes ``paths``."""
    newest = Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").first()
    generation = GenerationFactory(number=(newest.number + 1) if newest else 1)
    for path in paths:
        ScopeFactory(generation=generation, path=path)
    return generation


# --- configuration documents (through the real services) ------------------------------------

# A small valid document for tests. Scopes acme and acme/web. Bindings in acme: ``agent``
# (python, claims inject and interrupt), ``shell`` (command, no controls), ``inbox``
# (queue-only). Routes of acme, in order:
#   prs    github.pull_request.*  keys pr:{data.repository}#{data.number}  agent  queue
#   chat   chat.message           keys thread:{data.thread}                agent  inject, fallback queue
#   stop   ops.stop               keys pr:{data.repository}#{data.number}  agent  interrupt, fallback drop
#   notes  note.*                 keys note:{subject}                      inbox  queue, start false
#   noise  *.ping                 (no keys)                                -      drop
# acme/web redefines ``agent`` as a command (no controls: chat and stop fall back there),
# overrides ``prs`` in place (policy queue on ``shell``) and appends ``deploys``.
DEFAULT_TEST_CONFIG = """\
version: 1
scopes:
  - path: acme
    bindings:
      agent:
        executor: python
        settings: {target: "demo.agents:triage"}
        controls: [inject, interrupt]
      shell:
        executor: command
        settings: {argv: ["true"]}
      inbox: {}
    routes:
      - slot: prs
        handler: match
        params: {type: "github.pull_request.*", keys: ["pr:{data.repository}#{data.number}"]}
        binding: agent
        policy: queue
      - slot: chat
        handler: match
        params: {type: "chat.message", keys: ["thread:{data.thread}"]}
        binding: agent
        policy: inject
        fallback: queue
      - slot: stop
        handler: match
        params: {type: "ops.stop", keys: ["pr:{data.repository}#{data.number}"]}
        binding: agent
        policy: interrupt
        fallback: drop
      - slot: notes
        handler: match
        params: {type: "note.*", keys: ["note:{subject}"]}
        binding: inbox
        policy: queue
        start: false
      - slot: noise
        handler: match
        params: {type: "*.ping"}
        policy: drop
  - path: acme/web
    bindings:
      agent:
        executor: command
        settings: {argv: ["true"]}
    routes:
      - slot: prs
        handler: match
        params: {type: "github.pull_request.*", keys: ["pr:{data.repository}#{data.number}"]}
        binding: shell
        policy: queue
      - slot: deploys
        handler: match
        params: {type: "deploy.*", keys: ["deploy:{data.service}"]}
        binding: agent
        policy: queue
"""


def apply_config(
    yaml_text: str = DEFAULT_TEST_CONFIG, clock=None, *, candidate: bool = False, created_by: str = "tests"
) -> Generation:
    """Store a YAML document through the real services: applied as the next live generation,
    or as a candidate. Raises ``routing.config.ConfigInvalid`` like the services do."""
    store = config_candidate if candidate else config_apply
    return store(document=yaml_text, clock=clock or (lambda: T0), created_by=created_by)


# --- users and API tokens --------------------------------------------------------------------


# What a login the tests build may do unless told otherwise: read and accept Events (no
# operator control). ``UserFactory(permissions=())`` builds a login with no permission at all.
READER_PERMISSIONS = (VIEW_EVENT, ACCEPT_EVENT)


class UserFactory(factory.django.DjangoModelFactory):
    """A login; ``permissions=("app.codename", …)`` sets what it is granted directly
    (:data:`READER_PERMISSIONS` by default). :func:`user_with_role` builds one with a role."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.com")
    is_active = True

    @factory.post_generation
    def permissions(obj, create, extracted, **kwargs):
        if not create:
            return
        wanted = READER_PERMISSIONS if extracted is None else tuple(extracted)
        labels = {tuple(name.split(".", 1)) for name in wanted}
        obj.user_permissions.add(
            *(
                permission
                for permission in Permission.objects.select_related("content_type").filter(
                    codename__in={codename for _, codename in labels}
                )
                if (permission.content_type.app_label, permission.codename) in labels
            )
        )


def user_with_role(role: str, **kwargs) -> AbstractBaseUser:
    """A login with ``role`` (``viewer``, ``operator``, ``admin``) and no permission of its own."""
    user = UserFactory(permissions=(), **kwargs)
    with transaction.atomic():
        role_assign_in_tx(user=user, role=Role(role))
    return user


class ApiTokenFactory(factory.django.DjangoModelFactory):
    """An API token; pass ``secret=`` (from :func:`routing.access.tokens.token_generate`) to know it."""

    class Meta:
        model = ApiToken
        exclude = ["secret"]

    secret = factory.LazyFunction(lambda: token_generate()[1])
    user = factory.SubFactory(UserFactory)
    name = "tests"
    prefix = factory.LazyAttribute(lambda o: o.secret[:12])
    digest = factory.LazyAttribute(lambda o: token_digest(o.secret))
    created_at = T0


def api_token_with_secret(**kwargs) -> tuple[ApiToken, str]:
    """A stored API token and its secret (which the database does not hold)."""
    _, secret = token_generate()
    return ApiTokenFactory(secret=secret, **kwargs), secret


# --- route records (console tests) -----------------------------------------------------------


class RouteRecordFactory(factory.django.DjangoModelFactory):
    """A RouteRecord deciding an Event; pass ``work=`` to put it in a Work's history."""

    class Meta:
        model = RouteRecord

    event = factory.SubFactory("tests.causal.factories.EventFactory", route_state="routed")
    work = None
    scope = factory.SelfAttribute("event.scope")
    route = "prs"
    binding = "agent"
    generation = "1"
    policy = "queue"
    reason = ""
    decided_at = T0


class RateLimitTakeFactory(factory.django.DjangoModelFactory):
    """An Event a route with a rate limit took (``event=``: the Event)."""

    class Meta:
        model = RateLimitTake
        exclude = ("event",)

    event = factory.SubFactory("tests.causal.factories.EventFactory", route_state="routed")
    name = "rate_limit:acme:chat"
    event_seq = factory.SelfAttribute("event.seq")
    accepted_at = factory.SelfAttribute("event.accepted_at")


# --- receivers ---------------------------------------------------------------------------------


class ReceiverCountFactory(factory.django.DjangoModelFactory):
    """A receiver's count of one refusal reason (or of handshakes)."""

    class Meta:
        model = ReceiverCount

    receiver = "github"
    outcome = "signature_invalid"
    count = 1
    first_at = T0
    last_at = T0
    last_message = "the X-Hub-Signature-256 signature does not match the body"


# --- impact preview runs -----------------------------------------------------------------------


class ImpactRunFactory(factory.django.DjangoModelFactory):
    """A finished impact preview run of ``candidate`` (a candidate generation); add its changes
    with :class:`ImpactRunChangeFactory` and set ``changed`` and ``rollup`` to match."""

    class Meta:
        model = ImpactRun

    candidate = factory.SubFactory(GenerationFactory, kind=GenerationKind.CANDIDATE, number=None)
    candidate_number = factory.SelfAttribute("candidate.pk")
    live = "1"
    events = 1000
    status = "done"
    started_at = T0
    updated_at = T0
    finished_at = T0


class ImpactRunChangeFactory(factory.django.DjangoModelFactory):
    """A changed Event of an impact preview run, unmatched live and started by the candidate."""

    class Meta:
        model = ImpactRunChange

    run = factory.SubFactory(ImpactRunFactory)
    position = factory.Sequence(lambda n: n)
    seq = factory.Sequence(lambda n: n + 1)
    type = "alert.fired"
    scope = "acme"
    group = "unmatched → start"
    route = "alerts"
    live = factory.LazyFunction(lambda: {"result": {"effect": "unmatched", "verdicts": []}})
    candidate = factory.LazyFunction(
        lambda: {"result": {"effect": "start", "route": "alerts", "verdicts": []}}
    )


# The default test configuration, changed: acme's ``chat`` queues (no fallback), ``noise`` gives
# its place to a new ``alerts`` route, acme/web's ``deploys`` runs on ``shell``, and ``inbox``
# becomes a command binding.
CHANGED = (
    DEFAULT_TEST_CONFIG.replace(
        """        policy: inject
        fallback: queue""",
        """        policy: queue""",
    )
    .replace(
        """      - slot: noise
        handler: match
        params: {type: "*.ping"}
        policy: drop
""",
        """      - slot: alerts
        handler: match
        params: {type: "alert.*", keys: ["alert:{data.id}"]}
        binding: agent
        policy: queue
""",
    )
    .replace(
        """        params: {type: "deploy.*", keys: ["deploy:{data.service}"]}
        binding: agent""",
        """        params: {type: "deploy.*", keys: ["deploy:{data.service}"]}
        binding: shell""",
    )
    .replace("      inbox: {}\n", '      inbox: {executor: command, settings: {argv: ["true"]}}\n')
)
