"""Who may change what through the REST APIs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_permission_codename
from django.db import models
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tenancy.operators import may_operate, operate_permission


class Adds(BasePermission):
    """Members read; creating (any other method) needs what the admin would ask to add the
    view's ``added_model``: staff granted its ``add_<model>`` permission. Put it on a view
    whose only write is its ``create``; its actions carry ``Operates``. A create the admin
    offers as an operation (starting a run) takes ``Operates`` instead."""

    message = "You may not create these."

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        needed = add_permission(view.added_model)
        self.message = f"Only staff granted {needed} may do this."
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff and user.has_perm(needed))


def add_permission(model: type[models.Model]) -> str:
    """``"<app_label>.add_<model>"``, Django's permission to add the model's rows."""
    return f"{model._meta.app_label}.{get_permission_codename('add', model._meta)}"


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
