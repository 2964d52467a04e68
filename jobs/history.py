"""The one vocabulary of Conveyor's history tables.

A job's events, an export job's, an ingest run's actions, a market feed's and a handoff's
transitions are each a table of their own, with their own foreign key, indexes and extra
columns; their common columns are this abstract model's, named alike, so that every
console page and API reads any history the same way (and the console's ``HistoryInline``
shows each). The engine defines it because a job's events are one of them, and the
engine imports nothing above itself.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


def actor_field(*, db_index: bool = True) -> models.ForeignKey:
    """Who acted: a user, or none when Conveyor did. A history table written on every job's
    claim and outcome leaves out the index (``db_index=False``) and keeps a partial one of
    the rows a user wrote."""
    return models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="by",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=db_index,
    )


class History(models.Model):
    """One step of a row's history: when (``at``), what (``kind``), the status it moved
    from and to (empty when it did not move), who (``actor``) and through which door
    (``via``: ``admin``, ``api``, ``command``, or the system's own part, such as
    ``pipeline``), in words (``message``) and as data (``detail``).

    Each subclass declares its own ``kind`` (its choices and length). The optional
    columns have their defaults in the database too: the writers that insert history in
    SQL (the engine's claim, a handoff's sync) name only the columns they fill.
    """

    at = models.DateTimeField("at")
    kind = models.CharField("what", max_length=30)
    from_status = models.CharField("from", max_length=20, blank=True, default="", db_default="")
    to_status = models.CharField("to", max_length=20, blank=True, default="", db_default="")
    actor = actor_field()
    via = models.CharField(
        "via",
        max_length=20,
        blank=True,
        default="",
        db_default="",
        help_text="admin, api, command, or the part of Conveyor that acted (pipeline, engine …).",
    )
    message = models.TextField("message", blank=True, default="", db_default="")
    detail = models.JSONField(
        "detail", blank=True, default=dict, db_default=models.Value({}, models.JSONField())
    )

    class Meta:
        abstract = True
