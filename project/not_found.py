"""Unknown addresses: never Django's debug 404 page, which lists every URL pattern.

Under the API's prefixes (``/api/``, ``/v1/``, ``/sync/``, ``/jobs/``, ``/scraping/`` …)
the answer is the API's: ``{"detail": ...}``, as DRF answers for an object that does not
exist. Anywhere else it is the plain "Not Found" page, with or without ``DEBUG``. Both are
catch-all routes, so the URL resolver never fails (which is what makes Django show the
pattern list); they make the slash redirect CommonMiddleware would have made.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found

API_PREFIXES = ("api", "v1", "sync", "jobs", "scraping", "quality", "internal")


@csrf_exempt  # it changes nothing: a POST here gets the same JSON 404, not a CSRF page
def api_not_found(request: HttpRequest) -> JsonResponse:
    detail = "Not found."
    if not request.path.endswith("/") and _routes_elsewhere(f"{request.path}/"):
        # CommonMiddleware's slash redirect does not apply below a catch-all route;
        # the answer says what it would have done.
        detail = f"Not found. Did you mean {request.path}/ ?"
    return JsonResponse({"detail": detail}, status=404)


@csrf_exempt
def not_found(request: HttpRequest) -> HttpResponse:
    """Every other unknown address: Django's plain 404 page (the ``404.html`` template),
    or, for a GET of an address that exists with a trailing slash, a redirect there."""
    path = request.path
    if request.method in ("GET", "HEAD") and not path.endswith("/") and _routes_elsewhere(f"{path}/"):
        query = request.META.get("QUERY_STRING", "")
        return HttpResponsePermanentRedirect(f"{path}/" + (f"?{query}" if query else ""))
    return page_not_found(request, exception=None)


def _routes_elsewhere(path: str) -> bool:
    try:
        return resolve(path).func not in (api_not_found, not_found)
    except Resolver404:
        return False
