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


JSON_TYPES = ((bool, "true or false"), ((int, float), "a number"), (list, "a list"), (dict, "an object"))


class StrictConfig(serializers.Serializer):
    """A source's config. A key it does not know is refused: a misspelt setting must not
    pass silently for its default. A text setting must be given as text: DRF would read
    ``5`` as ``"5"``, and a config stored as given would then reach its ingester as a
    number."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            wrong = {
                str(key): ["is not a setting of this kind of source"]
                for key in data
                if key not in self.fields
            }
            wrong.update(
                {
                    key: [f"must be text, not {_json_type(value)}"]
                    for key, value in data.items()
                    if isinstance(self.fields.get(key), serializers.CharField)
                    and value is not None
                    and not isinstance(value, str)
                }
            )
            if wrong:
                raise serializers.ValidationError(dict(sorted(wrong.items())))
        return super().to_internal_value(data)


def _json_type(value: Any) -> str:
    return next((name for types, name in JSON_TYPES if isinstance(value, types)), type(value).__name__)


def dotted_path(default: str | None = None, **kwargs: Any) -> serializers.RegexField:
    """A field naming a value inside a JSON object: ``"items"`` or ``"data.items"``."""
    if default is not None:
        kwargs["default"] = default
    return serializers.RegexField(
        DOTTED_PATH,
        max_length=200,
        error_messages={"invalid": "must be a field name or a dotted path such as data.items"},
        **kwargs,
    )


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
        raise SourceError(
            f"{where}: the state to continue from takes {size} bytes, more than the {limit} allowed",
            transient=False,
        )
    return session
