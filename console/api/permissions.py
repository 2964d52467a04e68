"""Who may change what through the REST APIs."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tenancy.operators import may_operate, operate_permission


class StaffWrites(BasePermission):
    """Members read; only staff write: a change to the work of a whole tenant is an
    operator's decision. Apps subclass it for a ``message`` that names what they guard."""

    message = "Only staff may change jobs."

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.method in SAFE_METHODS or bool(request.user and request.user.is_staff)


class Operates(BasePermission):
    """Members read; an action (any other method) needs the ``operate_<model>``
    permission of the view's ``operated_model``, as its admin button and its command do,
    and a platform operator when the view's ``platform_operation`` says so. Put it on the
    action endpoints (``@action(permission_classes=...)``), or on a view that only acts."""

    message = "You may not operate these."

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        platform = getattr(view, "platform_operation", False)
        needed = operate_permission(view.operated_model)
        self.message = f"Only {'platform operators' if platform else 'staff'} granted {needed} may do this."
        return may_operate(request.user, view.operated_model, platform=platform)
