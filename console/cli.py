"""What the pipelines' management commands share with the engine's: the plain-text table
and the user a command acts as.

``table`` is the engine's own (``jobs.management.tables``: the engine may not import the
console, so the console re-exports it), so every command's listing reads alike.
``actor`` names the user recorded as having asked, and refuses one who may not do what
the command does: the same ``operate_<model>`` permission the admin's buttons and the
API's action endpoints ask (``tenancy.operators``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import models

from jobs.management.tables import table
from tenancy.operators import may_operate, operate_permission

__all__ = ["actor", "table"]


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
