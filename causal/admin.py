"""Admin of the acceptance ledger.

Every record here is history or evidence (R57): read-only, no add, no delete. Changes go
through the services, which keep acceptance order, ancestry and deduplication intact.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from causal.models import KV, CausalDiagnostic, Event, EventKey


class HistoryAdmin(admin.ModelAdmin):
    """A history record: every field read-only, nothing added, changed or deleted.

    Lists never count the whole table (``show_full_result_count = False``) and name their
    joins (``list_select_related``), so they cost the same whatever the history length.
    """

    show_full_result_count = False
    list_select_related: tuple[str, ...] = ()
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        """Every field of the model, so even a subclass that allowed changes shows none."""
        fields = [field.name for field in self.model._meta.concrete_fields]
        fields += [field.name for field in self.model._meta.many_to_many]
        return fields


class HistoryInline(admin.TabularInline):
    """A read-only inline of history rows."""

    extra = 0
    show_change_link = True
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class EventKeyInline(HistoryInline):
    model = EventKey
    fields = ("key", "scope")


@admin.register(Event)
class EventAdmin(HistoryAdmin):
    list_display = ("seq", "type", "source", "envelope_id", "scope", "route_state", "depth", "accepted_at")
    list_filter = ("route_state",)
    search_fields = ("=seq", "=envelope_id", "=work_id", "=execution_id", "=keys__key")
    ordering = ("-seq",)
    inlines = (EventKeyInline,)


@admin.register(EventKey)
class EventKeyAdmin(HistoryAdmin):
    list_display = ("key", "scope", "event")
    list_select_related = ("event",)
    search_fields = ("=key", "=event__seq")
    ordering = ("-id",)


@admin.register(KV)
class KVAdmin(HistoryAdmin):
    """KV entries are the router's and the causal limits' own records (failure counts, pinned
    limits, rate buckets): shown, never edited by hand (R53)."""

    list_display = ("namespace", "key", "version", "updated_at")
    list_filter = ("namespace",)
    search_fields = ("=namespace", "key")
    ordering = ("namespace", "key")


@admin.register(CausalDiagnostic)
class CausalDiagnosticAdmin(HistoryAdmin):
    list_display = (
        "id",
        "kind",
        "at",
        "occurrences",
        "last_at",
        "root_seq",
        "parent_seq",
        "type",
        "limit",
        "count",
    )
    list_filter = ("kind",)
    search_fields = ("=root_seq", "=parent_seq", "=envelope_id", "=work_id", "=attempt_id")
    ordering = ("-at", "-id")
