"""The admin's forms for sources and their hooks: what the database's constraints say,
checked before a save so that a mistake is a form error, never a 500.

A source's configuration is checked by its ingester (``ingesters.validate_config``),
whose DRF errors become the form's, field by field.
"""

from __future__ import annotations

from typing import Any

from django import forms
from rest_framework import serializers

from ingest import conf
from ingest.runs import ingesters
from ingest.runs.models import Hook, IngestSource
from tenancy.models import Tenant


def problems(detail: Any, prefix: str = "") -> list[str]:
    """A DRF error detail (nested dicts and lists) as lines naming each field."""
    if isinstance(detail, dict):
        return [line for name, inner in detail.items()
                for line in problems(inner, prefix if name == "non_field_errors" else f"{prefix}{name}: ")]
    if isinstance(detail, list):
        return [line for inner in detail for line in problems(inner, prefix)]
    return [f"{prefix}{detail}"]


class SourceForm(forms.ModelForm):
    # The tenant the source belongs to when the user may not choose it (tenant staff).
    fixed_tenant: int | None = None

    kind = forms.ChoiceField(label="Ingester", choices=())

    class Meta:
        model = IngestSource
        fields = ["tenant", "name", "kind", "config", "batch_size", "max_failures", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = list(ingesters.kinds())
        current = self.instance.kind if self.instance.pk else ""
        if current and current not in dict(choices):
            choices.append((current, f"{current} (not installed)"))
        self.fields["kind"].choices = [("", "---------"), *choices]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        tenant = self.fixed_tenant or getattr(data.get("tenant"), "pk", None) or self.instance.tenant_id
        name = data.get("name")
        if tenant and name and IngestSource.objects.filter(tenant_id=tenant, name=name).exclude(
                pk=self.instance.pk).exists():
            self.add_error("name", f"this tenant already has a source named {name!r}")
        if "config" in data and data["config"] is None:  # left empty
            data["config"] = {}
        if data.get("kind") and "config" in data and tenant:
            self._check_config(data["kind"], data["config"], tenant)
        most = conf.DEFAULTS["MAX_BATCH_RECORDS"]  # the check constraint's bound
        if data.get("batch_size") is not None and not 1 <= data["batch_size"] <= most:
            self.add_error("batch_size", f"between 1 and {most}")
        if data.get("max_failures") == 0:
            self.add_error("max_failures", "at least 1")
        return data

    def _check_config(self, kind: str, config: Any, tenant: int) -> None:
        if not isinstance(config, dict):
            self.add_error("config", "must be a JSON object")
            return
        try:
            ingesters.validate_config(kind, config,
                                      tenant=Tenant.objects.values_list("slug", flat=True).get(pk=tenant))
        except serializers.ValidationError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
            for line in problems(detail.pop("kind", [])):
                self.add_error("kind", line)
            for line in problems(detail):
                self.add_error("config", line)


class HookForm(forms.ModelForm):
    class Meta:
        model = Hook
        fields = ["name", "position", "image", "command", "env", "cpu_request", "memory_request",
                  "cpu_limit", "memory_limit", "timeout_seconds"]

    def clean_command(self) -> list[str]:
        command = self.cleaned_data.get("command")
        if not isinstance(command, list) or not command or not all(
                isinstance(arg, str) and arg for arg in command):
            raise forms.ValidationError('an argument list of strings, e.g. ["python", "check.py"]')
        return command

    def clean_env(self) -> dict[str, str]:
        env = self.cleaned_data.get("env")
        if env in (None, ""):
            return {}
        if not isinstance(env, dict) or not all(isinstance(v, (str, int, float)) and not
                                                isinstance(v, bool) for v in env.values()):
            raise forms.ValidationError('an object of names and values, e.g. {"LEVEL": "strict"}')
        return env

    def clean_timeout_seconds(self) -> int:
        timeout = self.cleaned_data["timeout_seconds"]
        if not 1 <= timeout <= 86_400:
            raise forms.ValidationError("between 1 and 86400 seconds")
        return timeout
