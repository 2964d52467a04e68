"""The REST API over the engine: jobs and events, scoped to the caller's tenant.

``views`` holds the viewsets (routed by ``console/urls.py``), ``serializers`` what they
read and write, ``pagination`` and ``filters`` the listing rules (cursor pages, filters
that refuse what they do not understand), and ``parsers`` the request bodies they accept.
``wrong_token`` counts a wrong token against its address for any door that takes one.
Other apps' APIs build on the pieces listed in ``__all__``.

The views are not imported here: DRF imports the pagination and parser classes named in
``REST_FRAMEWORK`` while its own view classes are being defined, and importing the views
from this package at that moment would import DRF's views again, half-defined.
"""

from __future__ import annotations

from console.api.filters import DateTimeFilter, StrictFilterBackend
from console.api.pagination import CheckedCursorPagination, NewestFirst, StrictLimitOffset
from console.api.parsers import BoundedJSONParser, holds_nul, object_body
from console.api.permissions import Adds, Operates
from console.api.scoping import visible_jobs
from console.api.serializers import (
    ClosedSerializer,
    ErrorSerializer,
    ErrorTextField,
    JobSerializer,
)
from console.api.streaming import StreamedJSONParser
from console.throttling import wrong_token

__all__ = [
    "Adds",
    "BoundedJSONParser",
    "CheckedCursorPagination",
    "ClosedSerializer",
    "DateTimeFilter",
    "ErrorSerializer",
    "ErrorTextField",
    "JobSerializer",
    "NewestFirst",
    "Operates",
    "StreamedJSONParser",
    "StrictFilterBackend",
    "StrictLimitOffset",
    "holds_nul",
    "object_body",
    "visible_jobs",
    "wrong_token",
]
