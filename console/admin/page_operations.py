"""An object's own operations as buttons on its admin page.

A model admin that lists ``page_operations`` shows, at the top of an object's page, a
button for each one the user may carry out on that object now (its permission, and
``Operation.allows``), with an optional reason; a confirmed operation asks its question
as a box to tick (``confirm-<name>``). The button posts to ``<id>/operate/<name>/``, which checks the
permission and the object's visibility again, carries the operation out through
``Operation.perform`` (the admin log entry names who and why) and returns to the page
with what happened, or with the service's refusal as a sentence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse

from console.admin.cells import sentence
from console.admin.operations import Operation

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _Base = ModelAdmin[Any]
else:
    _Base = object


class PageOperations(_Base):
    """Mixed into a ``ModelAdmin`` before it: ``page_operations`` are the buttons,
    ``refusals`` the exceptions a service raises to refuse (shown, not raised)."""

    page_operations: ClassVar[tuple[Operation, ...]] = ()
    refusals: ClassVar[tuple[type[Exception], ...]] = ()
    change_form_template = "admin/console/operated_change_form.html"

    def _operate_url_name(self) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_operate"

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<path:object_id>/operate/<str:operation>/",
                self.admin_site.admin_view(self.page_operation_view),
                name=self._operate_url_name(),
            )
        ]
        return own + super().get_urls()

    def page_operation_buttons(self, request: HttpRequest, obj: Any) -> list[tuple[Operation, str]]:
        """Each operation the user may carry out on ``obj`` now, with where it posts."""
        if obj is None:
            return []
        return [
            (op, reverse(f"admin:{self._operate_url_name()}", args=[obj.pk, op.name]))
            for op in self.page_operations
            if op.permitted(request) and op.allows(obj)
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        context = {**(extra_context or {}), "page_operations": self.page_operation_buttons(request, obj)}
        return super().change_view(request, object_id, form_url, context)

    def page_operation_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        op = next((op for op in self.page_operations if op.name == operation), None)
        if op is None:
            raise Http404(f"No operation {operation!r} here.")
        if not op.permitted(request):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"No such {self.opts.verbose_name} visible to you.")
        page = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk])
        if op.confirm and request.POST.get(f"confirm-{op.name}") != "yes":
            self.message_user(request, f"{op.label}: not done. Tick “{op.confirm}” first.", messages.WARNING)
            return redirect(page)
        try:
            result = op.perform(self, request, obj, request.POST.get("reason", ""), logged=obj)
        except self.refusals as exc:
            self.message_user(request, f"{op.label}: not done. {sentence(str(exc))}", messages.ERROR)
        else:
            self.message_user(request, op.reported(obj, result), messages.SUCCESS)
        return redirect(page)
