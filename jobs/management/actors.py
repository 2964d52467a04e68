"""The user a management command acts as (``--user``), and whether they may.

A command's action is recorded with the user named, so it must be one who could do the
same from the admin or the API: staff holding the ``operate_<model>`` permission of what
the command acts on (``tenancy.operators``), and a platform operator for a power over
every tenant. The engine's commands ask it here; the console re-exports it for the
pipelines' commands (``console.cli.actor``), as it does the engine's ``table``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import models

from tenancy.operators import may_operate, operate_permission


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
