"""Outbound fetches of tenant-supplied URLs against real servers on loopback addresses:
refused addresses (never connected to), redirects checked hop by hop, the allow-list,
TLS verified against the URL's host name, the total deadline and the size bound."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest

from intake.http_sources import FetchError, Limits, check, fetch
from tests.support.http_source import SourceServer


@pytest.fixture
def server():
    with SourceServer() as running:
        yield running


@pytest.fixture
def allow(settings):
    """Sets the deployment's allow-list for the test."""

    def set_to(*entries: str) -> None:
        settings.INTAKE_HTTP_ALLOW = list(entries)

    set_to()
    return set_to


def refusal(url: str, limits: Limits | None = None) -> FetchError:
    with pytest.raises(FetchError) as caught:
        fetch(url, limits or Limits())
    return caught.value


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "[::1]",
        "localhost",
        "[::ffff:127.0.0.1]",
        "2130706433",
        "0x7f.1",
        "017700000001",
        "127.1",
        "0.0.0.0",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "[fd00::1]",
        "[fe80::1]",
    ],
)
def test_it_refuses_a_url_whose_host_is_not_public_without_connecting(server, allow, host):
    url = server.url("/secret", host=host)
    error = refusal(url)

    assert not error.transient
    assert str(error) == f"{url} is not allowed: its host is not a public internet address"
    assert check(url) == "is not allowed: its host is not a public internet address"
    assert server.hits == []


@pytest.mark.parametrize("host", ["localhost", "2130706433", "0x7f.1"])
def test_a_refusal_does_not_name_the_address_a_host_resolved_to(server, allow, host):
    assert "127.0.0.1" not in str(refusal(server.url("/", host=host)))


def test_the_allow_list_lets_the_deployments_own_sources_through(server, allow):
    url = server.json("/units", {"units": []})
    allow("127.0.0.1/32")

    fetched = fetch(url)

    assert (fetched.body, fetched.content_type) == (b'{"units": []}', "application/json")
    assert check(url) is None


def test_a_host_name_on_the_allow_list_reaches_its_addresses_and_only_it(server, allow):
    server.json("/units", [])
    allow("localhost")

    assert fetch(server.url("/units", host="localhost")).body == b"[]"
    assert "not allowed" in str(refusal(server.url("/units", host="127.0.0.1")))


def test_it_connects_to_the_address_it_checked_without_resolving_again(server, allow, monkeypatch):
    """A name whose DNS answer changes between a check and the connection (DNS
    rebinding) cannot steer the connection: there is one lookup, then that address."""
    answers = iter(["127.0.0.1", "127.0.0.2", "127.0.0.2"])
    real = socket.getaddrinfo

    def rebinding_dns(host, port, *args, **kwargs):
        if host == "source.example":
            return real(next(answers), port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_dns)
    allow("127.0.0.1")
    server.json("/data", [1])

    assert fetch(server.url("/data", host="source.example")).body == b"[1]"
    assert next(answers) == "127.0.0.2"  # one answer was used, for the one connection


def test_a_redirect_to_a_loopback_address_is_refused_and_never_followed(server, allow):
    with SourceServer(host="127.0.0.2") as internal:
        internal.json("/admin", {"secret": True})
        url = server.redirect("/innocent", internal.url("/admin"))
        allow("127.0.0.1/32")

        error = refusal(url)

        assert not error.transient
        assert str(error) == (
            f"{url} redirected to a URL that is not allowed: its host is not a public internet address"
        )
        assert internal.hits == []


def test_redirects_among_allowed_hosts_are_followed(server, allow):
    server.json("/new", {"ok": True})
    server.redirect("/moved", server.url("/new"), status=301)
    allow("127.0.0.1")

    fetched = fetch(server.redirect("/old", "/moved"))

    assert (fetched.url, fetched.body) == (server.url("/new"), b'{"ok": true}')


def test_a_redirect_loop_ends_after_the_limit(server, allow):
    url = server.redirect("/loop", "/loop")
    allow("127.0.0.1")

    error = refusal(url, Limits(max_redirects=3))

    assert (str(error), error.transient) == (f"{url} redirected more than 3 times", False)
    assert server.hits == ["/loop"] * 4


def test_a_redirect_to_another_scheme_is_refused(server, allow):
    url = server.redirect("/file", "file:///etc/passwd")
    allow("127.0.0.1")

    assert str(refusal(url)) == f"{url} redirected to a URL that is not http or https"


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.org/x", "gopher://a/", "http://", "not a url", "http://[::1"]
)
def test_only_http_and_https_urls_are_fetched(url):
    assert check(url) == "must be an http:// or https:// URL"
    assert not refusal(url).transient


@pytest.mark.parametrize(
    ("status", "transient"), [(500, True), (503, True), (429, True), (404, False), (401, False), (410, False)]
)
def test_server_errors_and_throttling_are_transient_other_refusals_permanent(
    server, allow, status, transient
):
    url = server.raw("/x", b"{}", status=status)
    allow("127.0.0.1")

    error = refusal(url)

    assert error.transient is transient
    assert str(error).startswith(f"{url} answered {status} ")


def test_a_source_that_trickles_is_cut_off_at_the_deadline(server, allow):
    url = server.raw("/slow", b"[" + b" " * 200 + b"]", trickle=0.3)
    allow("127.0.0.1")

    started = time.monotonic()
    error = refusal(url, Limits(deadline_seconds=1.0))
    took = time.monotonic() - started

    assert error.transient
    assert str(error) == f"{url} did not send its whole answer within 1 s"
    assert 0.95 <= took < 1.0 + 0.3  # the deadline, and less than one more byte's wait


def test_a_source_that_does_not_answer_is_cut_off_at_the_deadline(server, allow):
    url = server.raw("/silent", b"{}", delay=3)
    allow("127.0.0.1")

    started = time.monotonic()
    error = refusal(url, Limits(deadline_seconds=0.5))

    assert time.monotonic() - started < 0.5 + 0.3
    assert (str(error), error.transient) == (f"{url} did not answer within 0.5 s", True)


def test_a_host_whose_dns_does_not_answer_is_given_up_at_the_deadline(monkeypatch, allow):
    release = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: release.wait(30) and [])
    try:
        started = time.monotonic()
        error = refusal("http://stalling-dns.example/x", Limits(deadline_seconds=0.5))
        assert time.monotonic() - started < 0.5 + 0.3
        assert (str(error), error.transient) == (
            "could not resolve the host of http://stalling-dns.example/x",
            True,
        )
    finally:
        release.set()


def test_a_refused_connection_to_an_allowed_host_is_transient(allow):
    with SourceServer() as gone:
        url = gone.url("/x")
    allow("127.0.0.1")

    error = refusal(url)

    assert (str(error), error.transient) == (f"could not connect to {url}", True)


@pytest.mark.parametrize("sized", [True, False])
def test_a_body_over_the_limit_is_refused_for_good(server, allow, sized):
    url = server.raw("/big", b"x" * 5000, sized=sized)
    allow("127.0.0.1")

    error = refusal(url, Limits(max_bytes=4096))

    assert (str(error), error.transient) == (f"{url} sent more than 4 kB", False)


@pytest.fixture(scope="module")
def certificate_authority():
    trustme = pytest.importorskip("trustme")
    return trustme.CA()


@pytest.fixture
def tls_server(certificate_authority):
    """An HTTPS source on 127.0.0.1 whose certificate names only "localhost"."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate_authority.issue_cert("localhost").configure_cert(context)
    with SourceServer(tls=context) as running:
        yield running


def test_tls_is_verified_against_the_urls_host_name_while_connecting_to_its_checked_address(
    tls_server, certificate_authority, allow
):
    trusted = ssl.create_default_context()
    certificate_authority.configure_trust(trusted)
    tls_server.json("/units", [])
    allow("localhost", "127.0.0.1")

    assert fetch(tls_server.url("/units", host="localhost"), tls=trusted).body == b"[]"
    with pytest.raises(FetchError, match="TLS certificate of .* could not be verified"):
        fetch(tls_server.url("/units"), tls=trusted)  # the certificate does not name 127.0.0.1
    with pytest.raises(FetchError, match="TLS certificate of .* could not be verified"):
        fetch(tls_server.url("/units", host="localhost"))  # nor is its issuer trusted by default
    assert tls_server.hits == ["/units"]
