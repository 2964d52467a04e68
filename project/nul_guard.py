"""A NUL character in an admin address is refused with a 400 before any view sees it.

PostgreSQL's text cannot hold one: a NUL reaching a query as a list filter's value, a
search term or a path segment fails in the driver, after the admin has accepted it, as a
500. The admin's filters and searches are many and Django's own; no admin address has a
use for a NUL, so they are all answered here. (The API and the other endpoints answer a
NUL in their own terms: an unknown name is a 404, a bad parameter a 400 naming it.)
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

DETAIL = "The address holds a NUL character (%00), which no field can take."
GUARDED = "/admin/"


class RefuseNulCharacters:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(GUARDED) and ("\x00" in request.path or "\x00" in _query(request)):
            return HttpResponseBadRequest(DETAIL, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def _query(request: HttpRequest) -> str:
    """The query string as the views will read it (percent-decoded)."""
    return "".join(key + "".join(values) for key, values in request.GET.lists())
