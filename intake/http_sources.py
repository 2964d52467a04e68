"""Fetching tenant-supplied URLs under the outbound rules.

- Only ``http`` and ``https``.
- Every address the host resolves to must be a public internet address, unless the
  allow-list (``INTAKE_HTTP_ALLOW``) names its network or the host. It is checked when
  connecting, for each redirect hop too, and the connection goes to an address that was
  checked (``intake.connections``). A refused address is never connected to.
- At most ``Limits.max_redirects`` redirects, followed here, hop by hop.
- One deadline over resolving, connecting, the headers and the whole body, and a bound
  on the body's size.
- Failures are sorted into transient (5xx, 429, timeouts, unreachable hosts) and
  permanent (other 4xx, refused addresses, too big, not an http URL). Their messages are
  safe to show the tenant who supplied the URL: a refused URL is "not allowed", without
  the address it resolved to, and since nothing is sent there, no message can tell
  whether something listens on it.

JSON sources: ``fetch_json`` fetches and decodes a JSON document, ``read_json`` decodes
an uploaded one up to a size bound; both keep numbers as their exact text.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import httpx

from intake import conf, connections

logger = logging.getLogger(__name__)

MB = 1024 * 1024
SCHEMES = ("http", "https")
NOT_HTTP = "must be an http:// or https:// URL"
NOT_ALLOWED = "is not allowed: its host is not a public internet address"


@dataclass(frozen=True)
class Limits:
    """How long and how much one fetch may take."""

    connect_seconds: float = 10.0  # resolving, connecting and the TLS handshake (each hop)
    deadline_seconds: float = 60.0  # everything, from the first lookup to the body's end
    max_bytes: int = 50 * MB
    max_redirects: int = 5


@dataclass(frozen=True)
class Fetched:
    url: str  # where the body came from, after redirects
    content_type: str
    body: bytes


class FetchError(Exception):
    """The URL could not be read. The message is safe to show whoever supplied the URL;
    ``transient`` says whether a retry may help."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class DocumentTooLarge(FetchError):
    """An uploaded document over its size bound (never retried)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


def check(url: str, *, timeout: float = 5.0) -> str | None:
    """Why ``url`` cannot be fetched, as far as is known before fetching it (None: as far
    as is known, it can): not an http(s) URL, or a host that resolves to an address the
    allow-list does not permit. A host that does not resolve now may later: that is left
    to the fetch. Phrased to follow the URL or its field name."""
    parsed = _parse(url)
    if parsed is None:
        return NOT_HTTP
    host = parsed.raw_host.decode("ascii")
    try:
        addresses = connections.resolve(host, parsed.port or _default_port(parsed), timeout)
    except connections.Unresolved:
        return None
    if not conf.http_allow_list().permits_all(host, addresses):
        _log_refused(url, connections.Refused(host, addresses))
        return NOT_ALLOWED
    return None


def fetch(
    url: str,
    limits: Limits = Limits(),
    *,
    headers: Mapping[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Fetched:
    """GET ``url`` under the outbound rules; FetchError says why not. ``tls`` is the
    trust store (default: certifi's CA bundle, or ``SSL_CERT_FILE``)."""
    if _parse(url) is None:
        raise FetchError(f"{url!r} {NOT_HTTP}", transient=False)
    deadline = connections.Deadline(limits.deadline_seconds)
    with guarded_client(deadline, limits.connect_seconds, headers=headers, tls=tls) as client:
        try:
            response = _open(client, url, limits)
        except (httpx.HTTPError, connections.Unresolved) as exc:
            raise _explain(exc, url, limits, deadline, answered=False) from exc
        with contextlib.closing(response):
            _check_status(response, url)
            try:
                body = _read(response, url, limits)
            except httpx.HTTPError as exc:
                raise _explain(exc, url, limits, deadline, answered=True) from exc
    return Fetched(str(response.url), response.headers.get("content-type", ""), body)


def guarded_client(
    deadline: connections.Deadline,
    connect_seconds: float,
    *,
    headers: Mapping[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> httpx.Client:
    """An httpx client under the outbound rules, for ``fetch`` and for other requests to
    a URL a tenant names (a POST to their API): each connection goes to an address the
    allow-list permits (``connections.Refused`` otherwise: nothing is sent), all within
    ``deadline``; no redirect followed, no proxy taken from the environment."""
    backend = connections.GuardedBackend(conf.http_allow_list(), deadline)
    return httpx.Client(
        transport=connections.GuardedTransport(backend, tls or default_tls()),
        timeout=httpx.Timeout(None, connect=connect_seconds),
        headers={"Accept-Encoding": "identity", **(headers or {})},
        follow_redirects=False,
        trust_env=False,
    )


@functools.cache
def default_tls() -> ssl.SSLContext:
    """One verifying TLS context per process (loading the CA bundle takes a while)."""
    return httpx.create_ssl_context()


def _parse(url: str) -> httpx.URL | None:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return None
    return parsed if parsed.scheme in SCHEMES and parsed.raw_host else None


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def _open(client: httpx.Client, url: str, limits: Limits) -> httpx.Response:
    """The response to ``url`` after following its redirects, its body not yet read."""
    request = client.build_request("GET", url)
    for hop in range(limits.max_redirects + 1):
        try:
            response = client.send(request, stream=True)
        except connections.Refused as exc:
            _log_refused(url, exc)
            raise FetchError(
                f"{url} {NOT_ALLOWED}" if hop == 0 else f"{url} redirected to a URL that {NOT_ALLOWED}",
                transient=False,
            ) from None
        if response.next_request is None:
            return response
        response.close()
        request = response.next_request
        if request.url.scheme not in SCHEMES:
            raise FetchError(f"{url} redirected to a URL that is not http or https", transient=False)
    raise FetchError(f"{url} redirected more than {limits.max_redirects} times", transient=False)


def _check_status(response: httpx.Response, url: str) -> None:
    if response.is_success:
        return
    status = response.status_code
    raise FetchError(
        f"{url} answered {status} {httpx.codes.get_reason_phrase(status)}".rstrip(),
        transient=status >= 500 or status == 429,
    )


def _read(response: httpx.Response, url: str, limits: Limits) -> bytes:
    return read_limited(
        response,
        limits.max_bytes,
        FetchError(f"{url} sent more than {_human(limits.max_bytes)}", transient=False),
    )


def read_limited(response: httpx.Response, max_bytes: int, too_big: Exception) -> bytes:
    """A streamed response's body, ``too_big`` raised as soon as it is known to be bigger
    than ``max_bytes`` (its declared length, or what has come so far)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def _explain(
    exc: Exception, url: str, limits: Limits, deadline: connections.Deadline, *, answered: bool
) -> FetchError:
    """A transport failure as a message for the tenant (the details go to the log)."""
    logger.info("fetching %s failed: %r", url, exc, extra={"url": url})
    if isinstance(exc, connections.Unresolved):
        return FetchError(f"could not resolve the host of {url}", transient=True)
    timed_out = isinstance(exc, httpx.TimeoutException)
    if timed_out and (answered or deadline.left() <= 0.05):
        verb = "send its whole answer" if answered else "answer"
        return FetchError(f"{url} did not {verb} within {limits.deadline_seconds:g} s", transient=True)
    if timed_out:
        return FetchError(f"could not connect to {url} within {limits.connect_seconds:g} s", transient=True)
    if isinstance(exc, httpx.ConnectError):
        unverified = _certificate_error(exc)
        if unverified is not None:
            return FetchError(
                f"the TLS certificate of {url} could not be verified ({unverified.verify_message})",
                transient=True,
            )
        return FetchError(f"could not connect to {url}", transient=True)
    if isinstance(exc, httpx.UnsupportedProtocol):
        return FetchError(f"{url!r} {NOT_HTTP}", transient=False)
    return FetchError(f"the connection to {url} broke off or did not speak HTTP", transient=True)


def _certificate_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    return cause


def _log_refused(url: str, refused: connections.Refused) -> None:
    logger.warning(
        "refused to fetch %s: %s",
        url,
        refused,
        extra={"url": url, "host": refused.host, "addresses": [str(a) for a in refused.addresses]},
    )


def _human(size: int) -> str:
    return f"{size // MB} MB" if size >= MB else f"{max(size // 1024, 1)} kB"


# --- JSON documents ---------------------------------------------------------------------------


def fetch_json(url: str, limits: Limits, *, headers: Mapping[str, str] | None = None) -> Any:
    """GET ``url`` under the outbound rules and decode its JSON body (numbers kept as
    their exact text). A body that is not JSON is a permanent FetchError naming the URL."""
    fetched = fetch(url, limits, headers={"Accept": "application/json", **(headers or {})})
    try:
        return json_document(fetched.body)
    except FetchError as exc:
        raise FetchError(f"{url} did not send valid JSON: {exc}", transient=False) from exc


def read_json(source: BinaryIO, max_bytes: int) -> Any:
    """Decode an uploaded JSON document, reading at most ``max_bytes`` of it: a bigger
    one is refused (DocumentTooLarge) without being held in memory whole."""
    body = source.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise DocumentTooLarge(
            f"the file is larger than the {_human(max_bytes)} limit: split it into smaller files"
        )
    return json_document(body)


def json_document(body: bytes) -> Any:
    """Decode JSON, keeping numbers as their exact text (``12.50`` stays ``"12.50"``), so
    that no value goes through a float. Not JSON: a permanent FetchError."""
    try:
        return json.loads(body, parse_float=str, parse_int=str)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FetchError(str(exc), transient=False) from exc
