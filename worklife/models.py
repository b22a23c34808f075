"""Work and what belongs to it: owned correlation keys, attempts, input (queued and
injected), intents, waits, timers and dependency subscriptions."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q

from causal.models import Event


class WorkStatus(models.TextChoices):
    READY = "ready", "ready"
    RUNNING = "running", "running"
    WAITING = "waiting", "waiting"
    COMPLETED = "completed", "completed"
    CANCELLED = "cancelled", "cancelled"


TERMINAL_STATUSES = frozenset({WorkStatus.COMPLETED, WorkStatus.CANCELLED})


class HoldKind(models.TextChoices):
    """What flow control holds a ready Work for (``worklife.flow``)."""

    CONCURRENCY = "concurrency", "concurrency limit"
    THROTTLE = "throttle", "throttle"
    DEBOUNCE = "debounce", "debounce"
    BATCH = "batch", "batching"


# How a refused dispatch reads in Work.last_error (an attempt's failure reads "attempt N …").
DISPATCH_REFUSED = "dispatch refused: "


class Work(models.Model):
    """A unit of work routed Events feed. Its scope never changes.

    ``version`` increases on every change: the router's commit compares it with the
    snapshot its decision assumed (R7).
    """

    # Indexed by work_scope_idx (no PostgreSQL LIKE index: nothing filters Work by a prefix).
    scope = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=WorkStatus.choices, default=WorkStatus.READY)
    # Indexed by work_parent_idx, on children only.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children", db_index=False
    )
    predecessor = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="successor"
    )
    trigger = models.ForeignKey(
        Event, null=True, blank=True, on_delete=models.PROTECT, related_name="triggered_work"
    )
    # The binding the Work was started on (the starting route's effective binding name).
    binding = models.CharField(max_length=128, blank=True, default="")
    # The binding a retry will run on; Control.Rebind rewrites it.
    retry_binding = models.CharField(max_length=128, blank=True, default="")
    # The last rebind and the attempt number it followed (R30).
    rebind_binding = models.CharField(max_length=128, blank=True, default="")
    rebind_after_attempt = models.PositiveIntegerField(null=True, blank=True)
    version = models.PositiveBigIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=150, blank=True, default="")
    # The scheduler's view (work_loop): attempts that failed in a row, when the Work may run
    # again after a failure or a refused dispatch, when it was parked (too many failures; an
    # operator retries or cancels it), and the last failure or refusal, in one line.
    failures = models.PositiveIntegerField(default=0)
    # Attempts lost in a row with their work loop (a crash, a lapsed lease): not failures, they
    # run again at once, but enough of them park the Work (it may be what kills its loop).
    losses = models.PositiveIntegerField(default=0)
    # Run even without pending input: a retry (the failed attempts' input is presented again),
    # a new child or successor (its core.work.created Event is its first input), an operator retry.
    pending_run = models.BooleanField(default=False)
    retry_at = models.DateTimeField(null=True, blank=True)
    parked_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=1000, blank=True, default="")
    # Its dispatch was refused (a queue-only binding, or one that cannot run): it waits for a
    # binding that can run it (a rebind, a new configuration). Not a backoff: ``retry_at`` is
    # then only when the work loop looks again.
    awaiting_binding = models.BooleanField(default=False)
    # Flow control's hold (worklife.flow): its kind, one line saying it, the gate it waits on (a
    # concurrency hold is released when an attempt of that gate ends) and until when the claim
    # leaves the Work alone. Not a failure: no retry state changes.
    hold_kind = models.CharField(max_length=16, choices=HoldKind.choices, blank=True, default="")
    hold_reason = models.CharField(max_length=500, blank=True, default="")
    hold_gate = models.CharField(max_length=600, blank=True, default="")
    held_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "Work"
        indexes = [
            models.Index(fields=["status", "id"], name="work_status_idx"),
            models.Index(fields=["scope"], name="work_scope_idx"),
            # Partial, as Event's parent index: most Work has no parent, and the router starts it.
            models.Index(fields=["parent"], name="work_parent_idx", condition=Q(parent__isnull=False)),
            # Flow control's release of the Work held on a gate (and its list filter).
            models.Index(fields=["hold_gate"], name="work_hold_gate_idx", condition=~Q(hold_kind="")),
        ]
        # The operator controls on Work, each granted on its own (API, console; the CLI is
        # trusted host access and checks none).
        permissions = [
            ("cancel_work", "Can cancel Work"),
            ("retry_work", "Can retry parked or backing-off Work"),
            ("send_input", "Can send operator input to Work"),
            ("create_work", "Can create Work"),
            ("rebind_work", "Can rebind Work"),
        ]

    def __str__(self) -> str:
        return f"Work {self.pk} ({self.scope}, {self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def is_parked(self) -> bool:
        return self.parked_at is not None and not self.is_terminal

    def is_backing_off(self, now: datetime | None) -> bool:
        """Whether the Work is backing off: ready, not parked, its next try set and after ``now``
        (``None``: whenever it is, as Retry asks). The one definition the Work pages, the Work
        list's filter and counts (:func:`backing_off_at`, the same rule as a query) and Retry use."""
        if (
            self.status != WorkStatus.READY
            or self.parked_at is not None
            or self.retry_at is None
            or self.awaiting_binding
        ):
            return False
        return now is None or self.retry_at > now

    @property
    def is_awaiting_binding(self) -> bool:
        """Ready, not parked, and its dispatch refused: waiting for a binding that can run it."""
        return self.status == WorkStatus.READY and self.parked_at is None and self.awaiting_binding

    @property
    def is_retryable(self) -> bool:
        """Whether Retry applies: ready Work that is parked or backing off (whenever its next
        try is): the one rule the retry write, ``worklife.scheduling.work_retry_in_tx``, and the
        console share."""
        return self.status == WorkStatus.READY and (self.parked_at is not None or self.is_backing_off(None))


def backing_off_at(now: datetime) -> Q:
    """The Work backing off at ``now`` as a query: :meth:`Work.is_backing_off` for many rows."""
    return Q(status=WorkStatus.READY, parked_at__isnull=True, retry_at__gt=now, awaiting_binding=False)


def awaiting_binding_q() -> Q:
    """Ready Work waiting for a binding that can run it (its dispatch refused), not parked."""
    return Q(status=WorkStatus.READY, parked_at__isnull=True, awaiting_binding=True)


class FlowGate(models.Model):
    """A flow control gate (a binding's or a key's concurrency limit or throttle): a row the
    claim locks ``FOR UPDATE`` before it counts the gate's attempts, so claims of every work
    loop on every host count one after another (``worklife.flow``). Only its name matters."""

    name = models.CharField(max_length=600, unique=True)

    def __str__(self) -> str:
        return self.name


class CorrelationKey(models.Model):
    """A correlation key owned by exactly one Work, for ever (a uniqueness constraint)."""

    scope = models.CharField(max_length=255)
    key = models.CharField(max_length=512)
    # Indexed by correlationkey_work_idx.
    work = models.ForeignKey(Work, on_delete=models.PROTECT, related_name="keys", db_index=False)
    attached_by = models.ForeignKey(Event, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    attached_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="correlationkey_owner_unique"),
        ]
        indexes = [models.Index(fields=["work"], name="correlationkey_work_idx")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key} -> Work {self.work_id}"


class AttemptState(models.TextChoices):
    RUNNING = "running", "running"
    WAITING = "waiting", "waiting (parked)"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    LOST = "lost", "lost (lease lapsed)"


ACTIVE_ATTEMPT_STATES = frozenset({AttemptState.RUNNING, AttemptState.WAITING})


class Attempt(models.Model):
    """One execution of Work. Its configuration is pinned at start (R36): the binding, the
    executor registration behind it, the generation and the capabilities. ``lease_epoch``
    fences stale holders. The attempt's id is the Execution id Events may target."""

    # Indexed by attempt_work_number_unique.
    work = models.ForeignKey(Work, on_delete=models.PROTECT, related_name="attempts", db_index=False)
    number = models.PositiveIntegerField()
    binding = models.CharField(max_length=128)
    executor = models.CharField(max_length=128, blank=True, default="")
    # The implementation the registration named when the attempt was pinned: a dispatch
    # under a changed executor behind the same name is refused (R36).
    executor_path = models.CharField(max_length=255, blank=True, default="")
    generation = models.PositiveIntegerField()
    capabilities = models.JSONField(default=list, blank=True)
    lease_epoch = models.PositiveBigIntegerField(default=1)
    lease_until = models.DateTimeField(null=True, blank=True)
    trigger = models.ForeignKey(Event, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=16, choices=AttemptState.choices, default=AttemptState.RUNNING)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # Who runs it: the work_loop holding the lease, and the process it started.
    lease_owner = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    # When that process started, in clock ticks after the host booted (/proc/PID/stat): a pid
    # the host gave another process since does not match, so a rescue never ends that one.
    pid_started = models.BigIntegerField(null=True, blank=True)
    # The same for every attempt that presents the same input again (after a failed or lost
    # one); new after a success. Executors make side effects exactly-once with it.
    idempotency_key = models.CharField(max_length=64, blank=True, default="")
    # How it ended: the result (JSON) or the exit status, the error, and the output's tails.
    result = models.JSONField(null=True, blank=True)
    exit_status = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    stdout_tail = models.TextField(blank=True, default="")
    stderr_tail = models.TextField(blank=True, default="")
    # The flow control gates it counts towards (worklife.flow): a concurrency gate while live,
    # a throttle gate by its start time ("": none).
    concurrency_key = models.CharField(max_length=600, blank=True, default="")
    throttle_key = models.CharField(max_length=600, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["work", "number"], name="attempt_work_number_unique"),
            # W1: the database, not Python, forbids a second live attempt of one Work.
            models.UniqueConstraint(
                fields=["work"],
                condition=Q(state__in=["running", "waiting"]),
                name="attempt_one_active_per_work",
            ),
        ]
        indexes = [
            models.Index(
                fields=["lease_until"],
                name="attempt_active_lease_idx",
                condition=Q(state__in=["running", "waiting"]),
            ),
            # The home page's trends: attempts started and ended per minute.
            models.Index(fields=["started_at"], name="attempt_started_at_idx"),
            models.Index(fields=["ended_at", "state"], name="attempt_ended_at_idx"),
            # Flow control's counts in the claim: live attempts per concurrency gate, recent
            # starts per throttle gate.
            models.Index(
                fields=["concurrency_key"],
                name="attempt_concurrency_idx",
                condition=Q(state__in=["running", "waiting"]) & ~Q(concurrency_key=""),
            ),
            models.Index(
                fields=["throttle_key", "started_at"],
                name="attempt_throttle_idx",
                condition=~Q(throttle_key=""),
            ),
        ]

    def __str__(self) -> str:
        return f"Attempt {self.number} of Work {self.work_id} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_ATTEMPT_STATES


class InputKind(models.TextChoices):
    QUEUE = "queue", "queued"
    INJECT = "inject", "injected"
    INTERRUPT = "interrupt", "interrupt"
    CONTEXT = "context", "context (waiting Work)"
    HELD = "held", "held for the running attempt"


# Pending input of these kinds makes ready Work claimable; an attempt starts with it (scheduling).
PRESENTED_KINDS = (InputKind.QUEUE, InputKind.CONTEXT)


class InputState(models.TextChoices):
    PENDING = "pending", "pending"
    CONSUMED = "consumed", "consumed"
    DROPPED = "dropped", "dropped (Work cancelled)"


class WorkInput(models.Model):
    """An Event given to a Work as input, in acceptance order (``seq`` is the Event's seq).

    One row per (Work, Event): replaying a route can never enqueue it twice, and consumption
    keeps its attempt association (R46).
    """

    # Indexed by workinput_work_event_unique.
    work = models.ForeignKey(Work, on_delete=models.PROTECT, related_name="inputs", db_index=False)
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="work_inputs")
    seq = models.BigIntegerField()
    binding = models.CharField(max_length=128, blank=True, default="")
    kind = models.CharField(max_length=16, choices=InputKind.choices, default=InputKind.QUEUE)
    state = models.CharField(max_length=16, choices=InputState.choices, default=InputState.PENDING)
    # Indexed by workinput_attempt_idx: pending input has no attempt yet, and the router writes
    # each routed Event's input pending.
    attempt = models.ForeignKey(
        Attempt, null=True, blank=True, on_delete=models.PROTECT, related_name="inputs", db_index=False
    )
    created_at = models.DateTimeField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    # The priority of the route it arrived through (worklife.flow): pending, it raises its Work's.
    priority = models.SmallIntegerField(default=0)

    class Meta:
        ordering = ["work", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["work", "event"], name="workinput_work_event_unique"),
        ]
        indexes = [
            models.Index(fields=["work", "seq"], name="workinput_work_seq_idx"),
            models.Index(
                fields=["work", "seq"],
                name="workinput_pending_idx",
                condition=Q(state="pending"),
            ),
            models.Index(
                fields=["attempt"], name="workinput_attempt_idx", condition=Q(attempt__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} -> Work {self.work_id} ({self.kind}, {self.state})"


class IntentState(models.TextChoices):
    PENDING = "pending", "pending"
    CONFIRMED = "confirmed", "confirmed"
    SUPERSEDED = "superseded", "superseded (attempt ended)"


class Intent(models.Model):
    """A stable inject/interrupt intent for one attempt at one lease epoch (R32)."""

    work = models.ForeignKey(Work, on_delete=models.PROTECT, related_name="intents")
    # Indexed by intent_identity_unique.
    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="intents", db_index=False)
    lease_epoch = models.PositiveBigIntegerField()
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="intents")
    kind = models.CharField(max_length=16, choices=[("inject", "inject"), ("interrupt", "interrupt")])
    state = models.CharField(max_length=16, choices=IntentState.choices, default=IntentState.PENDING)
    created_at = models.DateTimeField()
    confirmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["attempt", "lease_epoch", "event"], name="intent_identity_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.event_id} -> attempt {self.attempt_id}@{self.lease_epoch}"


class WaitState(models.TextChoices):
    ACTIVE = "active", "active"
    WOKEN = "woken", "woken"
    TIMED_OUT = "timed_out", "timed out"
    CANCELLED = "cancelled", "cancelled"


class Wait(models.Model):
    """A parked attempt waiting for an Event matching ``match`` (type glob and keys), or
    for ``timeout_at``."""

    # Indexed by wait_work_state_idx.
    work = models.ForeignKey(Work, on_delete=models.PROTECT, related_name="waits", db_index=False)
    attempt = models.ForeignKey(
        Attempt, null=True, blank=True, on_delete=models.PROTECT, related_name="waits"
    )
    name = models.CharField(max_length=128, blank=True, default="")
    match = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=WaitState.choices, default=WaitState.ACTIVE)
    timeout_at = models.DateTimeField(null=True, blank=True)
    woken_by = models.ForeignKey(Event, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    blocked_reason = models.CharField(max_length=500, blank=True, default="")
    # The Event whose wake the causal limits refused: the wake is tried again from it.
    blocked_event = models.ForeignKey(
        Event, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["work", "state"], name="wait_work_state_idx"),
            models.Index(fields=["timeout_at"], name="wait_active_timeout_idx", condition=Q(state="active")),
        ]

    def __str__(self) -> str:
        return f"Wait {self.name or self.pk} of Work {self.work_id} ({self.state})"


class TimerState(models.TextChoices):
    PENDING = "pending", "pending"
    FIRED = "fired", "fired"
    CANCELLED = "cancelled", "cancelled"
    REFUSED = "refused", "refused by causal limits"


class Timer(models.Model):
    """A timer owned by a Work; firing emits an Event, derived from ``parent`` when set (R56)."""

    work = models.ForeignKey(Work, on_delete=models.PROTECT, related_name="timers")
    due_at = models.DateTimeField()
    type = models.CharField(max_length=255)
    data = models.JSONField(null=True, blank=True)
    parent = models.ForeignKey(Event, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=16, choices=TimerState.choices, default=TimerState.PENDING)
    fired_event = models.ForeignKey(Event, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["due_at"], name="timer_due_idx", condition=Q(state="pending")),
        ]

    def __str__(self) -> str:
        return f"Timer {self.pk} of Work {self.work_id} due {self.due_at:%Y-%m-%d %H:%M:%S}"


class DependencySubscription(models.Model):
    """A waiting Work's subscription to Events of another scope (R42)."""

    work = models.ForeignKey(Work, on_delete=models.PROTECT, related_name="subscriptions")
    wait = models.ForeignKey(Wait, on_delete=models.PROTECT, related_name="subscriptions")
    scope = models.CharField(max_length=255)
    match = models.JSONField(default=dict, blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["scope"], name="depsub_scope_idx", condition=Q(active=True))]

    def __str__(self) -> str:
        return f"Work {self.work_id} subscribes to {self.scope}"


class PauseKind(models.TextChoices):
    SCOPE = "scope", "scope"
    BINDING = "binding", "binding"
    ROUTE = "route", "route"
    SCHEDULE = "schedule", "schedule"


class Pause(models.Model):
    """An operator's pause of a scope (and the scopes below it), a binding (by name, in a scope
    and below), a route (its slot in the scope that declares it) or a schedule: while it is
    active (not ended, ``until`` not passed) no attempt it holds starts (worklife.pauses)."""

    kind = models.CharField(max_length=16, choices=PauseKind.choices)
    scope = models.CharField(max_length=255)
    # The binding's name, the route's slot or the schedule's name ("" for a scope).
    name = models.CharField(max_length=128, blank=True, default="")
    paused_by = models.CharField(max_length=150, blank=True, default="")
    reason = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField()
    until = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        constraints = [
            # One open pause per target: pausing again is refused, resume ends it.
            models.UniqueConstraint(
                fields=["kind", "scope", "name"], condition=Q(ended_at__isnull=True), name="pause_one_open"
            ),
        ]
        indexes = [
            models.Index(fields=["created_at"], name="pause_open_idx", condition=Q(ended_at__isnull=True))
        ]
        permissions = [("pause_work", "Can pause and resume scopes, bindings, routes and schedules")]

    def __str__(self) -> str:
        target = f"{self.kind} {self.scope}" + (f":{self.name}" if self.name else "")
        return f"pause of {target}"

    def is_active(self, now: datetime) -> bool:
        return self.ended_at is None and (self.until is None or self.until > now)
