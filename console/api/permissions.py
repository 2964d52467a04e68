"""Who may change what through the REST APIs."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request


class StaffWrites(BasePermission):
    """Members read; only staff write: a change to the work of a whole tenant is an
    operator's decision. Apps subclass it for a ``message`` that names what they guard."""

    message = "Only staff may change jobs."

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.method in SAFE_METHODS or bool(request.user and request.user.is_staff)
