"""The Django admin's view of bulk jobs (D6): read-only, as every history is; a job is stored,
run and cancelled only through ``controls.jobs`` (the console, the API, the CLI)."""

from __future__ import annotations

from django.contrib import admin

from causal.admin import HistoryAdmin
from controls.models import BulkJob, BulkJobItem


@admin.register(BulkJob)
class BulkJobAdmin(HistoryAdmin):
    list_display = (
        "id",
        "kind",
        "state",
        "created_by",
        "position",
        "total",
        "succeeded",
        "refused",
        "created_at",
    )
    list_filter = ("kind", "state")
    search_fields = ("=id", "=created_by")
    ordering = ("-id",)


@admin.register(BulkJobItem)
class BulkJobItemAdmin(HistoryAdmin):
    list_display = ("id", "job", "position", "target", "outcome", "message")
    list_filter = ("outcome",)
    list_select_related = ("job",)
    search_fields = ("=id", "=job__id", "=target")
    ordering = ("-id",)
