"""The answer to a refused admin login (django-axes calls ``lockout_response``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.timesince import timesince


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """429 with Retry-After and a page that says why: too many failed logins for this
    username from this address, so even the right password is refused for the cool-off,
    which every further attempt starts again."""
    cool_off: timedelta = settings.AXES_COOLOFF_TIME
    now = timezone.now()
    context = {
        **admin.site.each_context(request),
        "title": "Login refused",
        "username": request.POST.get("username", ""),
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cool_off": timesince(now - cool_off, now),
    }
    response = TemplateResponse(request, settings.AXES_LOCKOUT_TEMPLATE, context, status=429)
    response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response.render()
