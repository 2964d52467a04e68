"""Django's admin autodiscovery imports ``<app>.admin`` of every installed app. The
engine's admin lives in ``jobs.contrib.admin``; importing its model admins here is what
registers them with the admin site."""

from __future__ import annotations

from jobs.contrib.admin import events, job, outbox, workers

__all__ = ["events", "job", "outbox", "workers"]
