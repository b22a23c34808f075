"""The Django admin's view of the live-update outbox (D6): read-only; rows are written only by
``infra.live`` in the transaction of the change they announce, and pruned after an hour."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from infra.models import LiveChange


@admin.register(LiveChange)
class LiveChangeAdmin(admin.ModelAdmin):
    list_display = ("id", "at", "groups", "works", "events")
    search_fields = ("=id",)
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
