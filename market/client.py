"""Calling a market-data API: one POST per call, answered with a table.

The request is a JSON body ``{"api_name", "token", "params", "fields"}`` (fields comma
separated); the answer ``{"code": 0, "msg": "", "data": {"fields": [...], "items":
[[...]]}}``. Application errors come with HTTP 200 and a non-zero ``code``.

Failures are sorted by what a retry can do about them:

- ``Transient``: HTTP 5xx, timeouts, connection errors, and an open day's empty table
  (the provider has not published it yet): worth another attempt in seconds;
- ``AuthFailed`` (HTTP 401/403, code -2001) and ``RateLimited`` (HTTP 429, code 40203):
  another attempt in seconds would fail the same way, or make the limit worse; the
  next daily batch, hours later, tries again;
- ``BadAnswer``: any other refusal or an answer that is not the table asked for;
- ``NotAllowed``: the feed's URL is not one Conveyor may call (a private address the
  intake's allow-list does not name): never sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from intake import connections, http_sources
from market import conf

AUTH_CODES = {-2001, 40001, 40002}
RATE_LIMIT_CODES = {40203, 40101}


class MarketError(Exception):
    """A call that did not bring its table; ``api_name`` says which."""

    retry = False

    def __init__(self, api_name: str, message: str) -> None:
        super().__init__(message)
        self.api_name = api_name


class Transient(MarketError):
    retry = True


class AuthFailed(MarketError):
    pass


class RateLimited(MarketError):
    pass


class BadAnswer(MarketError):
    pass


class NotAllowed(MarketError):
    """The feed's URL is refused by the outbound rules: nothing was sent."""


@dataclass(frozen=True)
class Table:
    fields: list[str]
    items: list[list[Any]]


def call(url: str, token: str, api_name: str, params: dict[str, Any], fields: list[str]) -> Table:
    """One call of ``api_name``: its table, with ``fields`` in that order, or a
    ``MarketError``. Under the outbound rules for URLs a tenant names (the intake's
    allow-list: public internet addresses only, unless allowed), with one deadline over
    the whole exchange and a bound on the answer's size."""
    body = {"api_name": api_name, "token": token, "params": params, "fields": ",".join(fields)}
    deadline = connections.Deadline(float(conf.get("MARKET_TIMEOUT_SECONDS")))
    with http_sources.guarded_client(deadline, float(conf.get("HTTP_CONNECT_SECONDS"))) as client:
        return _table(api_name, _post(client, url, body, api_name), fields)


def _post(client: httpx.Client, url: str, body: dict[str, Any], api_name: str) -> tuple[int, bytes]:
    limit = int(conf.get("MARKET_MAX_BYTES"))
    try:
        with client.stream("POST", url, json=body) as response:
            content = http_sources.read_limited(
                response, limit, BadAnswer(api_name, f"{api_name}: the answer is over {limit:,} bytes")
            )
            status = response.status_code
    except connections.Refused:
        raise NotAllowed(api_name, f"{api_name}: {url} {http_sources.NOT_ALLOWED}") from None
    except httpx.UnsupportedProtocol as exc:
        raise NotAllowed(api_name, f"{api_name}: {url} {http_sources.NOT_HTTP}") from exc
    except connections.Unresolved as exc:
        raise Transient(api_name, f"{api_name}: the API's host did not resolve ({exc})") from exc
    except httpx.TimeoutException as exc:
        raise Transient(api_name, f"{api_name}: timed out ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise Transient(api_name, f"{api_name}: {type(exc).__name__}: {exc}") from exc
    except httpx.InvalidURL as exc:
        raise NotAllowed(
            api_name, f"{api_name}: {url} is not a URL the API can be called at ({exc})"
        ) from exc
    return status, content


def _table(api_name: str, raw: tuple[int, bytes], fields: list[str]) -> Table:
    status, content = raw
    answer = _json(content)
    code = answer.get("code") if isinstance(answer, dict) else None
    message = str(answer.get("msg") or "") if isinstance(answer, dict) else ""
    if status in (401, 403) or code in AUTH_CODES:
        raise AuthFailed(
            api_name,
            f"{api_name}: authentication refused (HTTP {status}, code {code}): {message}".rstrip(": "),
        )
    if status == 429 or code in RATE_LIMIT_CODES:
        raise RateLimited(
            api_name, f"{api_name}: rate limited (HTTP {status}, code {code}): {message}".rstrip(": ")
        )
    if status >= 500:
        raise Transient(api_name, f"{api_name}: HTTP {status} from the API")
    if status != 200 or not isinstance(answer, dict):
        raise BadAnswer(api_name, f"{api_name}: HTTP {status}, not a JSON answer")
    if code != 0:
        raise BadAnswer(api_name, f"{api_name}: refused with code {code}: {message}")
    data = answer.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise BadAnswer(api_name, f"{api_name}: the answer has no table")
    if data.get("fields") != fields:
        raise BadAnswer(api_name, f"{api_name}: fields {data.get('fields')!r}, asked for {fields!r}")
    items = data["items"]
    most = int(conf.get("MARKET_MAX_ROWS"))
    if len(items) > most:
        raise BadAnswer(
            api_name,
            f"{api_name}: {len(items):,} rows in one answer; at most {most:,} (INGEST_MARKET_MAX_ROWS)",
        )
    for index, item in enumerate(items):
        if not isinstance(item, list) or len(item) != len(fields):
            raise BadAnswer(api_name, f"{api_name}: item {index} is not a row of {len(fields)} values")
    return Table(fields, items)


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None
