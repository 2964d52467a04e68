"""ASGI entry point: HTTP (admin, API, SSE) through Django, WebSocket through Channels.

Served by uvicorn (``python -m project.web``). Every HTTP request passes the body
limits (project/bodylimit.py) before Django reads a byte of it.
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
http_application = get_asgi_application()  # sets Django up before the imports below

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from console.streams.ws import JobEventsConsumer  # noqa: E402
from project.bodylimit import BodyLimit  # noqa: E402

if settings.DEBUG or settings.SERVE_STATIC:
    # The ASGI server serves no static files; in development (and small deployments
    # without a front proxy) Django's own handler serves the admin's CSS and JS.
    from project.staticfiles import StaticFiles

    http_application = StaticFiles(http_application)

websocket_application = AllowedHostsOriginValidator(
    AuthMiddlewareStack(
        URLRouter(
            [
                path("ws/jobs/", JobEventsConsumer.as_asgi()),
            ]
        )
    )
)

application = ProtocolTypeRouter({"http": BodyLimit(http_application), "websocket": websocket_application})
