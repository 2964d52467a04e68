"""The Channels layer without Redis: channels-postgres on Conveyor's own database.

channels-postgres wants a full database dict (``TIME_ZONE`` included, or the layer
silently becomes None) in its CONFIG. This subclass reads it from the
``channels_postgres`` database alias when the layer is first used instead, so the layer
always talks to the database Django talks to: a test run's layer uses the test
database (the alias mirrors ``default`` there), not the one named at settings time.
"""

from __future__ import annotations

from typing import Any

from channels_postgres.core import PostgresChannelLayer as _PostgresChannelLayer

ALIAS = "channels_postgres"  # the alias channels-postgres itself uses for group_discard


class PostgresChannelLayer(_PostgresChannelLayer):
    def __init__(self, **config: Any) -> None:
        from django.db import connections

        super().__init__(**{**connections[ALIAS].settings_dict, **config})
