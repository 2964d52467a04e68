"""The Prometheus page, ``/metrics``: a plain Django view (outside DRF) over the engine's
counters (``jobs.metrics``) and the job table's counts."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from jobs.metrics import JobStateCollector, OutboxCollector, app_collectors
from tenancy.scoping import tenant_scope


class _ThisProcess:
    """This process's default registry: the engine's counters, process and GC figures."""

    def collect(self) -> Iterable[Any]:
        return REGISTRY.collect()


def metrics_registry() -> CollectorRegistry:
    """A registry for one scrape: job counts from the database, plus the counters (summed
    over every process when PROMETHEUS_MULTIPROC_DIR is set, this process's otherwise)."""
    scrape = CollectorRegistry()
    shared = getattr(settings, "PROMETHEUS_MULTIPROC_DIR", "")
    if shared:
        MultiProcessCollector(scrape, path=shared)
    else:
        scrape.register(_ThisProcess())
    scrape.register(JobStateCollector())
    scrape.register(OutboxCollector())
    # Apps' own figures read at scrape time: each app registers its collectors in its
    # AppConfig.ready() (jobs.register_collector), so that the engine imports no app.
    for collector in app_collectors():
        scrape.register(collector())
    return scrape


def _metrics_access(request: HttpRequest) -> int | None:
    """None when the caller may scrape, else the HTTP status to answer."""
    if getattr(settings, "METRICS_PUBLIC", False):
        return None
    token = getattr(settings, "METRICS_TOKEN", "")
    offered = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(offered.encode(), f"Bearer {token}".encode()):
        return None
    user = request.user
    if not user.is_authenticated:
        return 401
    return None if user.is_staff and tenant_scope(user) is True else 403


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition: ``conveyor_jobs{state,type}`` and the outbox's lag per
    subscriber (read from the tables at scrape time, so every web process tells the same
    truth) and the engine's counters (claims, outcomes, rescues, handler durations).

    Access: with ``settings.METRICS_PUBLIC`` true anyone may scrape (a scraper inside a
    private network). Otherwise the scraper sends ``Authorization: Bearer <token>``, the
    token being ``settings.METRICS_TOKEN`` (from the environment variable of that name),
    or a logged-in staff platform operator opens it in a browser. The figures span every
    tenant, so a tenant's own staff is refused (403); no credentials answer 401.

    The counters are incremented in the cluster's worker processes: set
    ``PROMETHEUS_MULTIPROC_DIR`` (one directory shared by web and cluster processes) and
    they are summed from there; without it a process reports only its own.
    """
    status = _metrics_access(request)
    if status is not None:
        response = HttpResponse(
            "metrics need a bearer token or a staff platform operator\n",
            status=status,
            content_type="text/plain",
        )
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(metrics_registry()), content_type=content_type)
