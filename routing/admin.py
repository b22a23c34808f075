"""Admin of configuration generations, route records, receivers' counts, impact preview runs and
API tokens.

A generation (with its scopes, bindings, routes and receivers) is a stored document that routing
and RouteRecords name, and a RouteRecord is the one decision about an Event (R27): all history,
read-only, as are the Events routes with a rate limit took (what the limits count), the counts of what receivers refused (the receivers write them) and the impact
previews' runs and changed Events (their runs write them). API tokens
have their own admin (``routing.access.admin``): added with the secret shown once, revoked by an
action; so do logins (a role, never superuser) and groups (the roles, read-only), replacing
Django's own.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from causal.admin import HistoryAdmin, HistoryInline
from routing.access.admin import ApiTokenAdmin, RoleGroupAdmin, UserRoleAdmin
from routing.models import (
    ApiToken,
    Binding,
    Generation,
    ImpactRun,
    ImpactRunChange,
    RateLimitTake,
    Receiver,
    ReceiverCount,
    Route,
    RouteRecord,
    ScheduleState,
    Scope,
)


class ScopeInline(HistoryInline):
    model = Scope
    fields = ("path",)


class BindingInline(HistoryInline):
    model = Binding
    fields = ("name", "executor", "settings", "controls")


class RouteInline(HistoryInline):
    model = Route
    fields = ("position", "slot", "handler", "binding", "policy", "fallback", "start")


class ReceiverInline(HistoryInline):
    model = Receiver
    fields = ("name", "kind", "scope", "secret", "settings")


@admin.register(Generation)
class GenerationAdmin(HistoryAdmin):
    list_display = ("id", "number", "kind", "digest", "created_at", "created_by", "note")
    list_filter = ("kind",)
    search_fields = ("=id", "=number", "=digest", "note")
    ordering = ("-id",)
    inlines = (ScopeInline, ReceiverInline)


@admin.register(Scope)
class ScopeAdmin(HistoryAdmin):
    list_display = ("path", "generation")
    list_select_related = ("generation",)
    search_fields = ("=path", "=generation__number")
    ordering = ("-generation", "path")
    inlines = (BindingInline, RouteInline)


@admin.register(Binding)
class BindingAdmin(HistoryAdmin):
    list_display = ("name", "scope", "executor", "controls")
    list_select_related = ("scope", "scope__generation")
    search_fields = ("=name", "=scope__path", "=scope__generation__number")
    ordering = ("-scope__generation", "scope__path", "name")


@admin.register(Route)
class RouteAdmin(HistoryAdmin):
    list_display = ("slot", "scope", "position", "handler", "binding", "policy", "fallback", "start")
    list_select_related = ("scope", "scope__generation")
    search_fields = ("=slot", "=scope__path", "=scope__generation__number")
    ordering = ("-scope__generation", "scope__path", "position")


@admin.register(RouteRecord)
class RouteRecordAdmin(HistoryAdmin):
    list_display = ("event", "work", "policy", "reason", "disposition", "route", "generation", "decided_at")
    list_filter = ("disposition", "policy")
    list_select_related = ("event", "work")
    search_fields = ("=event__seq", "=event__envelope_id", "=work__id", "=route")
    ordering = ("-event",)


@admin.register(RateLimitTake)
class RateLimitTakeAdmin(HistoryAdmin):
    list_display = ("event_seq", "name", "accepted_at")
    search_fields = ("=event_seq", "=name")
    ordering = ("-event_seq",)


@admin.register(Receiver)
class ReceiverAdmin(HistoryAdmin):
    list_display = ("name", "kind", "scope", "generation", "secret")
    list_select_related = ("generation",)
    search_fields = ("=name", "=kind", "=scope", "=generation__number")
    ordering = ("-generation", "name")


@admin.register(ReceiverCount)
class ReceiverCountAdmin(HistoryAdmin):
    list_display = ("receiver", "outcome", "count", "first_at", "last_at", "last_message")
    list_filter = ("outcome",)
    search_fields = ("=receiver", "=outcome")
    ordering = ("receiver", "outcome")


@admin.register(ImpactRun)
class ImpactRunAdmin(HistoryAdmin):
    list_display = (
        "id",
        "candidate_number",
        "live",
        "status",
        "traced",
        "total",
        "changed",
        "started_by",
        "started_at",
    )
    list_filter = ("status",)
    search_fields = ("=id", "=candidate_number", "=started_by")
    ordering = ("-id",)


@admin.register(ImpactRunChange)
class ImpactRunChangeAdmin(HistoryAdmin):
    list_display = ("run", "position", "seq", "type", "group", "route")
    list_select_related = ("run",)
    search_fields = ("=run__id", "=seq", "=route")
    ordering = ("-run", "position")


admin.site.register(ApiToken, ApiTokenAdmin)
# Django's own user and group admins (registered by django.contrib.auth, loaded first) let a
# login with the admin role set superuser, staff, groups and permissions: replaced.
for model, model_admin in ((get_user_model(), UserRoleAdmin), (Group, RoleGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)


@admin.register(ScheduleState)
class ScheduleStateAdmin(HistoryAdmin):
    """Where each schedule stands; the route loops write it (routing.schedules): read-only here."""

    list_display = ("id", "scope", "name", "last_fire_time", "last_outcome", "fired", "skipped", "updated_at")
    search_fields = ("=id", "=scope", "=name")
