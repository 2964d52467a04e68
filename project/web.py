"""The web process: uvicorn serving ``project.asgi`` (admin, API, SSE and WebSocket).

    python -m project.web [--host 127.0.0.1] [--port 8000] [any other uvicorn option]

uvicorn streams request bodies to the application, which spools them to disk past
``FILE_UPLOAD_MAX_MEMORY_SIZE`` and bounds them (project/bodylimit.py). The options
below are what Conveyor needs from it; any given on the command line come after them,
and the last one given wins (``--timeout-graceful-shutdown 30``).
"""

from __future__ import annotations

import os
import sys

import uvicorn

OPTIONS = [
    "project.asgi:application",
    # httptools with bounds on the URL and headers (414, 431).
    "--http",
    "project.http_limits:LimitedHttpToolsProtocol",
    # A WebSocket client only sends subscriptions; the library's default allows 16 MB.
    "--ws-max-size",
    str(1024 * 1024),
    # Neither Django nor Channels speaks the lifespan protocol.
    "--lifespan",
    "off",
    # On SIGTERM, requests in flight get this long; event streams never end by themselves
    # (their clients reconnect with Last-Event-ID).
    "--timeout-graceful-shutdown",
    "10",
    # The client's address and scheme are Django's to decide from the forwarding headers
    # (TRUSTED_PROXIES, PROXY_SETS_X_FORWARDED_PROTO): uvicorn would otherwise believe
    # them from any connection on localhost, including a proxy that passes a client's own.
    "--no-proxy-headers",
]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    # Without DATABASE_URL, in a checkout, the embedded PostgreSQL must run before the
    # first request (./conveyor start has started it already; by hand, this does).
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.conf import settings

    if settings.EMBEDDED_POSTGRES_DIR:
        from devtools import embedded_db

        embedded_db.ensure_started()
    uvicorn.main.main(args=[*OPTIONS, *args], prog_name="python -m project.web")


if __name__ == "__main__":
    main()
