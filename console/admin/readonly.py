"""Admin pages over rows that their own paths write (the engine, a pipeline, a sync):
shown in the admin, never added, edited or deleted there."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from console.admin.lists import CappedCountPaginator


class ReadOnlyMixin:
    """For a ``ModelAdmin`` or an inline (whose permission checks also get ``obj``).
    Operators change such rows through the services' actions, which record who did."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """A read-only list that may grow large: its count is capped, never a whole-table
    ``COUNT(*)``."""

    paginator = CappedCountPaginator
    show_full_result_count = False


class ReadOnlyInline(ReadOnlyMixin, admin.TabularInline):
    extra = 0
    can_delete = False
