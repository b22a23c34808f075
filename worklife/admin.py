"""Admin of Work and what belongs to it.

Input consumed by an attempt, and intents, are history (read-only, R46, R32). The other
records are shown read-only as well, on purpose: Work, keys, attempts, waits and timers
change only through the lifecycle services and the router, which bump ``Work.version`` (the
router's commit revalidates it, R7), never move an owned key (R26) and never touch terminal
Work (R49). An edit by hand would bypass all three.
"""

from __future__ import annotations

from django.contrib import admin

from causal.admin import HistoryAdmin, HistoryInline
from worklife.models import (
    Attempt,
    CorrelationKey,
    DependencySubscription,
    FlowGate,
    Intent,
    Pause,
    Timer,
    Wait,
    Work,
    WorkInput,
)


class CorrelationKeyInline(HistoryInline):
    model = CorrelationKey
    fields = ("key", "scope", "attached_by", "attached_at")


class AttemptInline(HistoryInline):
    model = Attempt
    fields = ("number", "state", "binding", "executor", "generation", "lease_epoch", "started_at", "ended_at")


@admin.register(Work)
class WorkAdmin(HistoryAdmin):
    list_display = ("id", "scope", "status", "binding", "parent", "created_at", "updated_at")
    list_filter = ("status",)
    list_select_related = ("parent",)
    search_fields = ("=id", "=keys__key", "=trigger__seq")
    ordering = ("-id",)
    inlines = (CorrelationKeyInline, AttemptInline)


@admin.register(CorrelationKey)
class CorrelationKeyAdmin(HistoryAdmin):
    list_display = ("key", "scope", "work", "attached_by", "attached_at")
    list_select_related = ("work", "attached_by")
    search_fields = ("=key", "=work__id")
    ordering = ("-id",)


@admin.register(Attempt)
class AttemptAdmin(HistoryAdmin):
    list_display = ("id", "work", "number", "state", "binding", "executor", "generation", "lease_epoch")
    list_filter = ("state",)
    list_select_related = ("work",)
    search_fields = ("=id", "=work__id")
    ordering = ("-id",)


@admin.register(WorkInput)
class WorkInputAdmin(HistoryAdmin):
    """Queued and injected input. Consumed input is history (consumption keeps its attempt
    association, R46); pending input is the router's and the scheduler's to change."""

    list_display = ("seq", "work", "event", "kind", "state", "binding", "attempt", "consumed_at")
    list_filter = ("state", "kind")
    list_select_related = ("work", "event", "attempt")
    search_fields = ("=seq", "=work__id", "=event__envelope_id")
    ordering = ("-work", "-seq")


@admin.register(Intent)
class IntentAdmin(HistoryAdmin):
    list_display = ("id", "work", "attempt", "lease_epoch", "event", "kind", "state", "created_at")
    list_filter = ("state", "kind")
    list_select_related = ("work", "attempt", "event")
    search_fields = ("=id", "=work__id", "=attempt__id", "=event__seq")
    ordering = ("-id",)


@admin.register(Wait)
class WaitAdmin(HistoryAdmin):
    list_display = ("id", "work", "name", "state", "timeout_at", "woken_by", "blocked_reason")
    list_filter = ("state",)
    list_select_related = ("work", "woken_by")
    search_fields = ("=id", "=work__id", "name")
    ordering = ("-id",)


@admin.register(Timer)
class TimerAdmin(HistoryAdmin):
    list_display = ("id", "work", "type", "due_at", "state", "parent", "fired_event")
    list_filter = ("state",)
    list_select_related = ("work", "parent", "fired_event")
    search_fields = ("=id", "=work__id", "type")
    ordering = ("-due_at", "-id")


@admin.register(DependencySubscription)
class DependencySubscriptionAdmin(HistoryAdmin):
    list_display = ("id", "work", "wait", "scope", "active", "created_at")
    list_filter = ("active",)
    list_select_related = ("work", "wait")
    search_fields = ("=id", "=work__id", "=scope")
    ordering = ("-id",)


@admin.register(Pause)
class PauseAdmin(HistoryAdmin):
    """Pauses change only through controls.pauses (pause, resume): read-only here."""

    list_display = ("id", "kind", "scope", "name", "paused_by", "reason", "created_at", "until", "ended_at")
    list_filter = ("kind",)
    search_fields = ("=id", "=scope", "=name", "=paused_by")


@admin.register(FlowGate)
class FlowGateAdmin(HistoryAdmin):
    """A flow control gate (``worklife.flow``): a row the work loops' claims lock, by name."""

    list_display = ("id", "name")
    search_fields = ("=id", "name")
    ordering = ("name",)
