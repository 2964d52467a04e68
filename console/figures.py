"""The figures each app adds to the console's front page.

An app's ``overview.py`` registers the function that gives its figures with
``@console.admin.front_page_figures``; ``ConsoleConfig.ready()`` imports every app's
``overview.py``, and the front page shows each provider's figures after the engine's, in
the order the apps are installed. A provider takes the request and returns the
``Figure``s its user may see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from django.http import HttpRequest

    from console.overview import Figure

Provider = Callable[["HttpRequest"], Sequence["Figure"]]
P = TypeVar("P", bound=Provider)

_providers: list[Provider] = []


def front_page_figures(provider: P) -> P:
    """Show what ``provider(request)`` returns on the front page; registering one twice
    changes nothing. Returns the provider unchanged (a decorator)."""
    if provider not in _providers:
        _providers.append(provider)
    return provider


def providers() -> list[Provider]:
    return list(_providers)
