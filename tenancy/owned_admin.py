"""The admin of a model a tenant owns (it has a ``tenant`` foreign key), edited through a
form that takes a ``fixed_tenant``.

Staff of a tenant add and edit their tenant's rows only: the tenant field is not shown,
and the form and the saved row get their tenant. A platform operator picks the tenant
when adding, filters by it, and never moves a row to another tenant afterwards (its
jobs and data carry the tenant). Each admin still scopes its own queryset, which may
annotate or prefetch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from tenancy.scoping import tenant_scope

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups
    from django.utils.datastructures import _ListOrTuple

    # The mixins go before ``admin.ModelAdmin``: what they call through ``super()`` is its.
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object


def is_platform_operator(request: HttpRequest) -> bool:
    return tenant_scope(request.user) is True


class PlatformWritesAdmin(_ModelAdmin):
    """Mix in before ``admin.ModelAdmin`` for rows that are the platform's to give (a
    hook catalogue entry, a tenant's engine identity): only platform operators add,
    change or delete them; a tenant's staff may at most view what their queryset shows."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_platform_operator(request) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_platform_operator(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_platform_operator(request) and super().has_delete_permission(request, obj)


class TenantOwnedAdmin(_ModelAdmin):
    """Mix in before ``admin.ModelAdmin``; ``form`` is a ModelForm with ``fixed_tenant``."""

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        own = list(self.list_filter)
        return [*own, "tenant"] if is_platform_operator(request) else own

    def has_add_permission(self, request: HttpRequest) -> bool:
        return tenant_scope(request.user) not in (False, None) and super().has_add_permission(request)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> _FieldGroups:
        fields = list(self.form.Meta.fields)  # type: ignore[attr-defined]  # a ModelForm's Meta
        return fields if is_platform_operator(request) else [f for f in fields if f != "tenant"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> _ListOrTuple[str]:
        return ["tenant"] if obj is not None and is_platform_operator(request) else []

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        scope = tenant_scope(request.user)
        fixed = scope if isinstance(scope, int) and not isinstance(scope, bool) else None
        return type(form.__name__, (form,), {"fixed_tenant": fixed})

    def save_model(self, request: HttpRequest, obj: models.Model, form: Any, change: bool) -> None:
        if form.fixed_tenant is not None:
            obj.tenant_id = form.fixed_tenant  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)
