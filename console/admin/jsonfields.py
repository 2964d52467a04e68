"""The admin's JSON fields, read by the API's rule: nothing PostgreSQL cannot store.

Django's form field decodes ``{"a": "\\ud800"}`` to a string holding a lone surrogate,
and ``NaN``, ``Infinity`` or ``1e999`` to a float that is not a number JSON can hold,
which jsonb refuses at the save: a 500 where a form error naming the problem belongs.
``StoredJSONField`` is that form error; ``use_everywhere`` makes it the form field of
every model ``JSONField`` in every registered admin and its inlines.
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.apps import apps
from django.contrib.admin import AdminSite
from django.db import models
from django.forms.fields import InvalidJSONInput

from jobs.arguments import may_not_store, stored_text_problem


class StoredJSONField(forms.JSONField):
    """Django's JSON form field, refusing a NUL character or a lone surrogate in any
    string or key, by where it is (``the value["a"] holds a lone surrogate …``)."""

    def to_python(self, value: Any) -> Any:
        converted = super().to_python(value)
        if isinstance(value, str) and may_not_store(value):
            problem = stored_text_problem(converted, "the value")
            if problem:
                raise forms.ValidationError(problem, code="unstorable")
        if isinstance(value, str) and not _finite(converted):
            # Python's json reads NaN, Infinity and an overflowing 1e999; JSON has none.
            raise forms.ValidationError(
                "the value holds a number JSON cannot hold (NaN, Infinity, or one too large such as 1e999)",
                code="unstorable",
            )
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        """A refused value is shown again as the text that was sent, as Django shows
        text that is not JSON: decoded, its lone surrogate could not be written out."""
        bound = super().bound_data(data, initial)
        if isinstance(data, str) and may_not_store(data) and stored_text_problem(bound, ""):
            return InvalidJSONInput(data)
        return bound


def _finite(value: Any) -> bool:
    """Whether every number in decoded JSON ``value`` is finite (iterative: any depth)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def use_everywhere(site: AdminSite) -> None:
    """Makes ``StoredJSONField`` the form field of model JSON fields in every admin
    registered on ``site`` and in their inlines (an admin's own choice of widget is
    kept). Run once every app has registered its admins."""
    for model in apps.get_models():
        if not site.is_registered(model):
            continue
        model_admin = site.get_model_admin(model)
        _prefer(model_admin.formfield_overrides)
        for inline in model_admin.inlines:
            # Inline admins are made per request from their class's overrides.
            inline.formfield_overrides = {**inline.formfield_overrides}
            _prefer(inline.formfield_overrides)


def _prefer(overrides: dict[Any, dict[str, Any]]) -> None:
    overrides[models.JSONField] = {"form_class": StoredJSONField, **overrides.get(models.JSONField, {})}
