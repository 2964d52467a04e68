"""Django finds a template tag library only in the ``templatetags`` package of an
installed app. The market admin's templates load ``market_admin``; its filters are those
of ``market.rendering``."""

from __future__ import annotations

from market.rendering import register

__all__ = ["register"]
