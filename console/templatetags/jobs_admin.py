"""Django finds a template tag library only in the ``templatetags`` package of an
installed app. The templates of the engine's admin pages load ``jobs_admin``; its filters
are those of ``console.admin.rendering``."""

from __future__ import annotations

from console.admin.rendering import register

__all__ = ["register"]
