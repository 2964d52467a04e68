"""Static files served by the web process itself (development, small deployments)."""

from __future__ import annotations

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404, HttpRequest, HttpResponseBase


class StaticFiles(ASGIStaticFilesHandler):
    """Django's ASGI static files handler, with 404 for a path that leads outside the
    static folders (``/static/..%2f..%2fetc%2fpasswd``): the finders refuse it with
    SuspiciousFileOperation, which that handler lets through as a 500."""

    def serve(self, request: HttpRequest) -> HttpResponseBase:
        try:
            return super().serve(request)
        except SuspiciousFileOperation as exc:
            raise Http404("No such static file.") from exc
