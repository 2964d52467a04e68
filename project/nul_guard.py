"""A NUL character in an address is refused with a 400 before any view sees it.

PostgreSQL's text cannot hold one: a NUL reaching a query as a filter value, a search
term or a path segment fails in the driver, after the view has accepted it, as a 500.
No Conveyor address has a use for one, so this answers them all at the door, in the
API's JSON under its prefixes and as plain text elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from project.not_found import API_PREFIXES

DETAIL = "The address holds a NUL character (%00), which no field can take."


class RefuseNulCharacters:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path or "\x00" in _query(request):
            if request.path.lstrip("/").split("/", 1)[0] in API_PREFIXES:
                return JsonResponse({"detail": DETAIL}, status=400)
            return HttpResponseBadRequest(DETAIL, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def _query(request: HttpRequest) -> str:
    """The query string as the views will read it (percent-decoded)."""
    return "".join(key + "".join(values) for key, values in request.GET.lists())
