"""The API's Swagger page, for logged-in people.

drf-spectacular's split view: the page loads its start-up script from this same URL
(``?script``) instead of inlining it, so the Content-Security-Policy needs no inline
script; the page's one ``<style>`` carries the response's nonce
(console/templates/drf_spectacular/swagger_ui.html).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.views import redirect_to_login
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated


class ApiDocsView(SpectacularSwaggerSplitView):
    """A person without a session is sent to the admin login, which comes back here; the
    schema itself (``/api/schema/``) answers 401 like the rest of the API."""

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, NotAuthenticated | AuthenticationFailed):
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)
