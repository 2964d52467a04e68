"""ASGI entry point: HTTP (admin, API, SSE) and, later, WebSocket through Channels."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_asgi_application()

if settings.DEBUG or os.environ.get("SERVE_STATIC") == "1":
    # daphne serves no static files itself; in development (and small deployments
    # without a front proxy) Django's own handler serves the admin's CSS and JS.
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    application = ASGIStaticFilesHandler(application)
