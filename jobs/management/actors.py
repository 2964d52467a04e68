"""The user a management command acts as (``--user``), and whether they may.

A command's action is recorded with the user named, so it must be one who could do the
same from the admin or the API: staff holding the ``operate_<model>`` permission of what
the command acts on (``tenancy.operators``), and a platform operator for a power over
every tenant. A tenant's staff act on their tenant's rows only, as in the admin
(``within_reach``, ``must_reach``). The engine's commands ask it here; the console
re-exports both for the pipelines' commands (``console.cli``), as it does the engine's
``table``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import models
from django.db.models import QuerySet

from tenancy.operators import may_operate, operate_permission
from tenancy.scoping import scope_queryset, tenant_scope

M = TypeVar("M", bound=models.Model)


def actor(username: str | None, operated: type[models.Model] | None = None, *, platform: bool = False) -> Any:
    """The user called ``username`` (None without one: the command acts as nobody), who
    must hold ``operated``'s operate permission (and be a platform operator for a
    ``platform`` power) when ``operated`` is given."""
    if username is None:
        return None
    try:
        user = get_user_model()._default_manager.get_by_natural_key(username)
    except get_user_model().DoesNotExist:
        raise CommandError(f"no user named {username!r}") from None
    if operated is not None and not may_operate(user, operated, platform=platform):
        who = "a platform operator (staff)" if platform else "staff"
        raise CommandError(
            f"{username!r} may not do this: it needs {who} granted {operate_permission(operated)}"
        )
    return user


def within_reach(rows: QuerySet[M], user: Any, field: str = "tenant") -> QuerySet[M]:
    """``rows`` narrowed to those ``user`` (a command's actor) may act on through
    ``field``, the path to their tenant: every row for a platform operator, or for no
    user (whoever runs the command acts for the platform); their tenant's for its staff."""
    return rows if user is None else scope_queryset(rows, user, field)


def must_reach(user: Any, tenant_id: int | None, what: str) -> None:
    """Refuse a ``user`` (a command's actor) who may not act on ``what``, a row of the
    tenant ``tenant_id`` (None: the platform's own)."""
    if user is None:
        return
    scope = tenant_scope(user)
    if scope is True or (tenant_id is not None and scope == tenant_id):
        return
    raise CommandError(f"{user.get_username()!r} may not act on {what}: it is not their tenant's")
