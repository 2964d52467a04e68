"""The calculator's HTTP JSON sources (the unit directory, API ingest): the intake's
outbound rules and JSON reading (``intake.http_sources``) with the calculator's limits
(``FACTORS_HTTP_*``) and its User-Agent.

A failure is retryable or not as the intake sorts it: a 5xx, a 429, a timeout or an
unreachable host is worth retrying later; a 4xx, a body that is not JSON or a URL the
outbound rules refuse is not. Every error message is safe to show whoever supplied the
URL.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from factors import conf
from intake import http_sources

# One error for both layers: a failed fetch and a body that is not JSON alike.
SourceError = http_sources.FetchError
DocumentTooLarge = http_sources.DocumentTooLarge

HEADERS = {"Accept": "application/json", "User-Agent": "conveyor-factors/1"}


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be a source (None: it can, as far as is known before fetching
    it): only http(s) URLs whose host the outbound rules allow, so that a request naming
    an internal address is refused at once rather than by its job."""
    return http_sources.check(url, timeout=conf.http_connect_seconds())


def fetch_json(url: str) -> Any:
    """GET ``url`` and decode its JSON body (numbers kept as their exact text)."""
    limits = http_sources.Limits(
        connect_seconds=conf.http_connect_seconds(),
        deadline_seconds=conf.http_deadline_seconds(),
        max_bytes=conf.http_max_bytes(),
    )
    return http_sources.fetch_json(url, limits, headers=HEADERS)


def read_json(source: BinaryIO, kind: str) -> Any:
    """An uploaded JSON file of ``kind`` (its size limit is that of the kind's CSV)."""
    return http_sources.read_json(source, conf.max_bytes(kind))
