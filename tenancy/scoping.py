"""Which tenants' rows a user may see: the one rule every API, admin page and stream uses."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from tenancy.models import Membership

# The caller's own queryset class comes back, with its named methods.
Q = TypeVar("Q", bound=QuerySet[Any, Any])


def tenant_scope(user: User | AnonymousUser) -> int | None | bool:
    """The tenant id the user is limited to; True for all tenants, False for none."""
    if isinstance(user, AnonymousUser) or not user.is_authenticated:
        return False
    try:
        membership = user.membership
    except Membership.DoesNotExist:
        # Superusers without a membership are platform operators by construction.
        return True if user.is_superuser else False
    if membership.is_platform_operator:
        return True
    return membership.tenant_id


def scope_queryset(queryset: Q, user: User | AnonymousUser, field: str = "tenant") -> Q:
    """Narrow ``queryset`` to the rows ``user`` may see through ``field``."""
    scope = tenant_scope(user)
    if scope is True:
        return queryset
    if scope is False or scope is None:
        return queryset.none()
    return queryset.filter(**{f"{field}_id": scope})
