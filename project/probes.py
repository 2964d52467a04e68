"""``GET /health`` and ``GET /ready`` for an orchestrator's probes.

``/health`` says the process answers (liveness: restart it if not); ``/ready`` says it
can serve, its database answering a ``SELECT 1`` (readiness: send it no traffic if not).
They are answered first, before the host check and the HTTPS redirect: a kubelet asks
by the pod's IP address, over plain HTTP. They say nothing else: no version, no error
text that could name a host.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse

PATHS = ("/health", "/ready")


def _ready() -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        connection.close()  # a broken connection is not kept for the next request
        return JsonResponse({"status": "unavailable", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ready"})


class Probes:
    """Answers the probes' two paths ahead of every other middleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info in PATHS and request.method in ("GET", "HEAD"):
            response = _ready() if request.path_info == "/ready" else JsonResponse({"status": "alive"})
            response["Cache-Control"] = "no-store"
            return response
        return self.get_response(request)
