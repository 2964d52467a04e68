"""Which tenants' rows a user may see: the one rule every API, admin page and stream uses."""

from __future__ import annotations

from typing import TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Model, QuerySet

from tenancy.models import Membership

M = TypeVar("M", bound=Model)


def tenant_scope(user: AbstractBaseUser | AnonymousUser) -> int | None | bool:
    """The tenant id the user is limited to; True for all tenants, False for none."""
    if not user.is_authenticated:
        return False
    try:
        membership = user.membership  # type: ignore[union-attr]
    except Membership.DoesNotExist:
        # Superusers without a membership are platform operators by construction.
        return True if user.is_superuser else False  # type: ignore[union-attr]
    if membership.is_platform_operator:
        return True
    return membership.tenant_id


def scope_queryset(
    queryset: QuerySet[M], user: AbstractBaseUser | AnonymousUser, field: str = "tenant"
) -> QuerySet[M]:
    """Narrow ``queryset`` to the rows ``user`` may see through ``field``."""
    scope = tenant_scope(user)
    if scope is True:
        return queryset
    if scope is False or scope is None:
        return queryset.none()
    return queryset.filter(**{f"{field}_id": scope})
