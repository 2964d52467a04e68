"""What the ingesters' configs and sessions have in common: strict serializers, dotted
paths into JSON documents, and the bound on a session's size."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from ingest import conf
from ingest.runs.errors import SourceError

DOTTED_PATH = re.compile(r"^[^.\s]+(\.[^.\s]+)*$")


class StrictConfig(serializers.Serializer):
    """A source's config. A key it does not know is refused: a misspelt setting must not
    pass silently for its default."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key: ["is not a setting of this kind of source"] for key in unknown})
        return super().to_internal_value(data)


def dotted_path(default: str | None = None, **kwargs: Any) -> serializers.RegexField:
    """A field naming a value inside a JSON object: ``"items"`` or ``"data.items"``."""
    if default is not None:
        kwargs["default"] = default
    return serializers.RegexField(DOTTED_PATH, max_length=200, error_messages={
        "invalid": "must be a field name or a dotted path such as data.items"}, **kwargs)


MISSING = object()


def dig(document: Any, path: str) -> Any:
    """The value at the dotted ``path`` of ``document``; ``MISSING`` if there is none."""
    for name in path.split("."):
        if not isinstance(document, dict) or name not in document:
            return MISSING
        document = document[name]
    return document


def bounded(session: dict[str, Any], where: str) -> dict[str, Any]:
    """``session`` if its JSON fits ``INGEST_MAX_SESSION_BYTES``: it is stored with every
    batch, so a source must not make it grow without bound."""
    limit = int(conf.get("MAX_SESSION_BYTES"))
    size = len(json.dumps(session).encode())
    if size > limit:
        raise SourceError(f"{where}: the state to continue from takes {size} bytes, more than "
                          f"the {limit} allowed", transient=False)
    return session
