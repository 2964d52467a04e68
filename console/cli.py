"""What the pipelines' management commands share with the engine's: the plain-text table
and the user a command acts as.

Both are the engine's own (``jobs.management``: the engine may not import the console, so
the console re-exports them), so every command's listing reads alike and every command
that acts for a ``--user`` refuses one who may not do what it does. ``actor`` names the
user recorded as having asked and asks the same ``operate_<model>`` permission the
admin's buttons and the API's action endpoints ask (``tenancy.operators``); ``must_reach``
and ``within_reach`` hold a tenant's staff to their tenant's rows, as the admin does.
"""

from __future__ import annotations

from jobs.management.actors import actor, must_reach, within_reach
from jobs.management.tables import table

__all__ = ["actor", "must_reach", "table", "within_reach"]
