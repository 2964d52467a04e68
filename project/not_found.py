"""Unknown addresses under the API's prefixes answer like the API: JSON, not an HTML page.

Django's own 404 page is HTML, and with ``DEBUG`` on it lists every URL pattern. An API
client (or a scanner) that strays under ``/api/``, ``/v1/``, ``/sync/``, ``/jobs/`` or
``/scraping/`` gets ``{"detail": ...}`` instead, as DRF answers for an object that does
not exist, and learns nothing about the other routes.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt

API_PREFIXES = ("api", "v1", "sync", "jobs", "scraping", "quality", "internal")


@csrf_exempt  # it changes nothing: a POST here gets the same JSON 404, not a CSRF page
def api_not_found(request: HttpRequest) -> JsonResponse:
    detail = "Not found."
    if not request.path.endswith("/") and _routes_elsewhere(f"{request.path}/"):
        # CommonMiddleware's slash redirect does not apply below a catch-all route;
        # the answer says what it would have done.
        detail = f"Not found. Did you mean {request.path}/ ?"
    return JsonResponse({"detail": detail}, status=404)


def _routes_elsewhere(path: str) -> bool:
    try:
        return resolve(path).func is not api_not_found
    except Resolver404:
        return False
