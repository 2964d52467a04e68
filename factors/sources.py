"""Reading JSON from HTTP sources (the unit directory, API ingest), with the failures of
the outside world sorted into retryable and not: a 5xx, a 429, a timeout or a refused
connection is worth retrying later; a 4xx or a body that is not JSON is not."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from factors import conf


class SourceError(Exception):
    """The source could not be read; ``transient`` says whether a retry may help."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be a source (None: it can). Only http and https: a file:// or
    ftp:// URL would let a caller read the server's own files."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed "[" of an IPv6 host, a bad port …
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "must be an http:// or https:// URL"
    return None


def fetch_json(url: str) -> Any:
    """GET ``url`` and decode its JSON body (numbers kept as their exact text)."""
    problem = check_url(url)
    if problem:
        raise SourceError(f"{url!r} {problem}", transient=False)
    request = urllib.request.Request(url, headers={"Accept": "application/json",
                                                   "User-Agent": "conveyor-factors/1"})
    timeout, limit = conf.http_timeout(), conf.http_max_bytes()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(limit + 1)
    except urllib.error.HTTPError as exc:
        retry = exc.code >= 500 or exc.code == 429
        raise SourceError(f"{url} answered {exc.code} {exc.reason}", transient=retry) from exc
    except TimeoutError as exc:
        raise SourceError(f"{url} did not answer within {timeout:g} s", transient=True) from exc
    except (urllib.error.URLError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(f"could not reach {url}: {reason}", transient=True) from exc
    if len(body) > limit:
        raise SourceError(f"{url} sent more than {limit // (1024 * 1024)} MB", transient=False)
    try:
        return json_document(body)
    except SourceError as exc:
        raise SourceError(f"{url} did not send valid JSON: {exc}", transient=False) from exc


def json_document(body: bytes) -> Any:
    """Decode JSON, keeping numbers as their exact text (``12.50`` stays ``"12.50"``)."""
    try:
        return json.loads(body, parse_float=str, parse_int=str)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SourceError(str(exc), transient=False) from exc
