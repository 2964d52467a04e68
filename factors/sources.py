"""Reading JSON from HTTP sources (the unit directory, API ingest), with the failures of
the outside world sorted into retryable and not: a 5xx, a 429, a timeout or an
unreachable host is worth retrying later; a 4xx, a body that is not JSON or a URL the
outbound rules refuse is not.

The URLs come from tenants and operators, so they are fetched under the intake's
outbound rules (``intake.http_sources``: public addresses unless allow-listed, every
redirect checked, a total deadline, a size bound), and every error message is safe to
show whoever supplied the URL.
"""

from __future__ import annotations

import json
from typing import Any

from factors import conf
from intake import http_sources

# One error for both layers: a failed fetch and a body that is not JSON alike.
SourceError = http_sources.FetchError

HEADERS = {"Accept": "application/json", "User-Agent": "conveyor-factors/1"}


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be a source (None: it can, as far as is known before fetching
    it). Only http and https: a file:// or ftp:// URL would let a caller read the
    server's own files; and only hosts the outbound rules allow, so that a request
    naming an internal address is refused at once rather than by its job."""
    return http_sources.check(url, timeout=conf.http_connect_seconds())


def fetch_json(url: str) -> Any:
    """GET ``url`` and decode its JSON body (numbers kept as their exact text)."""
    limits = http_sources.Limits(connect_seconds=conf.http_connect_seconds(),
                                 deadline_seconds=conf.http_deadline_seconds(),
                                 max_bytes=conf.http_max_bytes())
    fetched = http_sources.fetch(url, limits, headers=HEADERS)
    try:
        return json_document(fetched.body)
    except SourceError as exc:
        raise SourceError(f"{url} did not send valid JSON: {exc}", transient=False) from exc


def json_document(body: bytes) -> Any:
    """Decode JSON, keeping numbers as their exact text (``12.50`` stays ``"12.50"``)."""
    try:
        return json.loads(body, parse_float=str, parse_int=str)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SourceError(str(exc), transient=False) from exc
