"""The site root: a person is sent to the admin, an API client to the API's documentation.

Nothing here is a page of its own: the admin is the console, ``/api/docs/`` the API's
reference (both ask for a login). A client that asks for JSON gets the addresses.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import reverse


def home(request: HttpRequest) -> HttpResponse:
    links = {
        "admin": reverse("admin:index"),
        "api_docs": reverse("api-docs"),
        "api_schema": reverse("api-schema"),
    }
    if request.accepts("text/html"):
        return HttpResponseRedirect(links["admin"])
    return JsonResponse(links)
