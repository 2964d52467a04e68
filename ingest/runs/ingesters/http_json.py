"""An HTTP JSON API paged by an opaque cursor: each GET sends the cursor of the page before
(none for the first) and the batch size, and the answer carries the page's items and
the cursor of the next page (null, absent or empty: the last page).

Every request goes through the intake's outbound rules (``intake.http_sources``): the
allow-list, one deadline, a bound on the body (``INGEST_MAX_BATCH_BYTES``), and its
sorting of failures into transient (5xx, 429, timeouts, unreachable) and permanent.
Numbers keep their exact text, as everywhere JSON comes in (``12.50`` is ``"12.50"``).
Messages show the URL without its query string or user info, which may hold secrets.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from rest_framework import serializers

from ingest import conf
from ingest.runs.errors import SourceError
from ingest.runs.ingesters.base import Fetched, Ingester, register
from ingest.runs.ingesters.config import MISSING, StrictConfig, bounded, dig, dotted_path
from intake.http_sources import FetchError, Limits, check, fetch_json

DEFAULTS = {
    "items_field": "items",
    "cursor_field": "next_cursor",
    "cursor_param": "cursor",
    "limit_param": "limit",
}


class HttpJsonConfig(StrictConfig):
    url = serializers.CharField(max_length=2000)
    items_field = dotted_path(DEFAULTS["items_field"])
    cursor_field = dotted_path(DEFAULTS["cursor_field"])
    cursor_param = serializers.CharField(default=DEFAULTS["cursor_param"], max_length=100)
    limit_param = serializers.CharField(default=DEFAULTS["limit_param"], max_length=100)
    key_field = dotted_path(required=False)

    def validate_url(self, value: str) -> str:
        """Refused now if the outbound rules already say no; a host that does not resolve
        yet is left to the fetch."""
        problem = check(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["cursor_param"] == attrs["limit_param"]:
            raise serializers.ValidationError({"limit_param": ["must differ from cursor_param"]})
        return attrs


def shown(url: str) -> str:
    """``url`` without its user info, query and fragment: safe for messages."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


@register
class HttpJson(Ingester):
    kind = "http_json"
    label = "HTTP JSON with cursor pagination"
    config_serializer = HttpJsonConfig

    def fetch(
        self, config: dict[str, Any], session: dict[str, Any], batch_size: int, *, tenant: str
    ) -> Fetched:
        option = {**DEFAULTS, **config}
        where = shown(config["url"])
        cursor = _cursor_of(session, where)
        page = _get(_page_url(option, cursor, batch_size), where)
        records = _items(page, option, batch_size, where)
        following = _next_cursor(page, option["cursor_field"], where)
        if following is None:
            return Fetched(records, {}, has_more=False)
        if following == cursor:
            raise SourceError(
                f"{where} answered the cursor {cursor!r} with the same cursor again: its pages would loop",
                transient=False,
            )
        return Fetched(records, bounded({"cursor": following}, where), has_more=True)


def _cursor_of(session: dict[str, Any], where: str) -> str | None:
    cursor = session.get("cursor")
    if set(session) - {"cursor"} or not (cursor is None or (isinstance(cursor, str) and cursor)):
        raise SourceError(
            f"{where}: cannot continue from {session!r}, which this source did not write", transient=False
        )
    return cursor


def _page_url(option: dict[str, Any], cursor: str | None, batch_size: int) -> str:
    url = httpx.URL(option["url"])
    if cursor is not None:
        url = url.copy_set_param(option["cursor_param"], cursor)
    return str(url.copy_set_param(option["limit_param"], str(batch_size)))


def _get(url: str, where: str) -> Any:
    limits = Limits(
        connect_seconds=float(conf.get("HTTP_CONNECT_SECONDS")),
        deadline_seconds=float(conf.get("HTTP_DEADLINE_SECONDS")),
        max_bytes=int(conf.get("MAX_BATCH_BYTES")),
    )
    try:
        return fetch_json(url, limits)
    except FetchError as exc:
        raise SourceError(str(exc).replace(url, where), transient=exc.transient) from exc


def _items(page: Any, option: dict[str, Any], batch_size: int, where: str) -> list[dict[str, Any]]:
    def refuse(problem: str) -> SourceError:
        return SourceError(f"{where} {problem}", transient=False)

    if not isinstance(page, dict):
        raise refuse("did not send a JSON object")
    items = dig(page, option["items_field"])
    if items is MISSING:
        raise refuse(f"sent no {option['items_field']!r} field")
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise refuse(f"sent a {option['items_field']!r} that is not a list of JSON objects")
    if len(items) > batch_size:
        raise refuse(
            f"sent {len(items)} items when asked for at most {batch_size} "
            f"(with the {option['limit_param']!r} parameter)"
        )
    key = option.get("key_field")
    if key:
        for index, item in enumerate(items):
            if dig(item, key) in (MISSING, None):
                raise refuse(f"sent an item without its key field {key!r} (item {index + 1} of {len(items)})")
    return items


def _next_cursor(page: dict[str, Any], field: str, where: str) -> str | None:
    cursor = dig(page, field)
    if cursor is MISSING or cursor is None or cursor == "":
        return None
    if not isinstance(cursor, str):  # numbers are text already
        raise SourceError(f"{where} sent a {field!r} that is not a string", transient=False)
    return cursor
