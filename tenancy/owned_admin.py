"""The admin of a model a tenant owns (it has a ``tenant`` foreign key), edited through a
form that takes a ``fixed_tenant``.

Staff of a tenant add and edit their tenant's rows only: the tenant field is not shown,
and the form and the saved row get their tenant. A platform operator picks the tenant
when adding, filters by it, and never moves a row to another tenant afterwards (its
jobs and data carry the tenant). Each admin still scopes its own queryset, which may
annotate or prefetch.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.http import HttpRequest

from tenancy.scoping import tenant_scope


def is_platform_operator(request: HttpRequest) -> bool:
    return tenant_scope(request.user) is True


class PlatformWritesAdmin:
    """Mix in before ``admin.ModelAdmin`` for rows that are the platform's to give (a
    hook catalogue entry, a tenant's engine identity): only platform operators add,
    change or delete them; a tenant's staff may at most view what their queryset shows."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_platform_operator(request) and super().has_add_permission(request)  # type: ignore[misc]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_platform_operator(request) and super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_platform_operator(request) and super().has_delete_permission(request, obj)  # type: ignore[misc]


class TenantOwnedAdmin:
    """Mix in before ``admin.ModelAdmin``; ``form`` is a ModelForm with ``fixed_tenant``."""

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        own = list(self.list_filter)  # type: ignore[attr-defined]
        return [*own, "tenant"] if is_platform_operator(request) else own

    def has_add_permission(self, request: HttpRequest) -> bool:
        return tenant_scope(request.user) not in (False, None) and super().has_add_permission(request)  # type: ignore[misc]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(self.form.Meta.fields)  # type: ignore[attr-defined]
        return fields if is_platform_operator(request) else [f for f in fields if f != "tenant"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["tenant"] if obj is not None and is_platform_operator(request) else []

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)  # type: ignore[misc]
        scope = tenant_scope(request.user)
        fixed = scope if isinstance(scope, int) and not isinstance(scope, bool) else None
        return type(form.__name__, (form,), {"fixed_tenant": fixed})

    def save_model(self, request: HttpRequest, obj: models.Model, form: Any, change: bool) -> None:
        if form.fixed_tenant is not None:
            obj.tenant_id = form.fixed_tenant  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)  # type: ignore[misc]
