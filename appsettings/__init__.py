"""Typed app settings, read from Django's settings each time they are asked for.

Every app's ``conf.py`` is written with ``AppSettings``: the engine's and the pipelines'
(through ``jobs.AppSettings``) and the intake's, which may not import the engine. So it
is a package of its own, below them all, that imports Django and nothing of Conveyor.

An app's ``conf.py`` declares each of its settings once: its name, what a deployment's
value is turned into, its default, and (in a comment above) what it means::

    SETTINGS = AppSettings("EXPORTS_")
    # The most jobs one claim may take.
    claim_limit = SETTINGS.integer("CLAIM_LIMIT", 10)

    conf.claim_limit()         # int(settings.EXPORTS_CLAIM_LIMIT), or 10 when unset
    conf.get("CLAIM_LIMIT")    # the same, by name

A deployment sets ``<prefix><NAME>`` in its settings (project/settings.py reads it from
the environment). Nothing is read at import or kept afterwards, so ``override_settings``
and pytest-django's ``settings`` fixture apply from the next call on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.conf import settings

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One setting: called, it gives the deployment's value (its default when unset),
    turned into a ``T`` by ``convert``."""

    name: str
    convert: Callable[[Any], T]
    default: Any

    def __call__(self) -> T:
        return self.convert(getattr(settings, self.name, self.default))


class AppSettings:
    """The settings an app declares, each named ``prefix`` + its name in Django's settings.

    ``integer``, ``number``, ``flag``, ``text``, ``strings`` and ``mapping`` declare a
    setting of that kind; ``given`` one whose readers check the value themselves (and
    say what is wrong with it); ``declare`` one with a conversion of its own."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._declared: dict[str, Setting[Any]] = {}

    def declare(self, name: str, convert: Callable[[Any], T], default: Any) -> Setting[T]:
        if name in self._declared:
            raise ValueError(f"{self.prefix}{name} is declared twice")
        setting = Setting(self.prefix + name, convert, default)
        self._declared[name] = setting
        return setting

    def integer(self, name: str, default: int) -> Setting[int]:
        return self.declare(name, int, default)

    def number(self, name: str, default: float) -> Setting[float]:
        return self.declare(name, float, default)

    def flag(self, name: str, default: bool) -> Setting[bool]:
        return self.declare(name, bool, default)

    def text(self, name: str, default: str) -> Setting[str]:
        return self.declare(name, _text, default)

    def strings(self, name: str, default: list[str]) -> Setting[list[str]]:
        return self.declare(name, _strings, default)

    def mapping(self, name: str, default: dict[str, Any]) -> Setting[dict[str, Any]]:
        return self.declare(name, _mapping, default)

    def given(self, name: str, default: Any) -> Setting[Any]:
        return self.declare(name, _given, default)

    def get(self, name: str) -> Any:
        """A declared setting's value by its name without the prefix (KeyError for one
        that is not declared)."""
        return self._declared[name]()

    def declared(self) -> Mapping[str, Setting[Any]]:
        return dict(self._declared)


def _text(value: Any) -> str:
    return "" if value is None else str(value)  # None is no text, not "None"


def _strings(value: Any) -> list[str]:
    return [str(item) for item in value]


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value)


def _given(value: Any) -> Any:
    return value
