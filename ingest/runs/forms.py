"""The admin's forms for sources, their hooks and the hook catalogue: what the database's
constraints and the catalogue's rules say, checked before a save so that a mistake is a
form error, never a 500.

A source's configuration is checked by its ingester (``ingesters.validate_config``),
whose DRF errors become the form's, field by field, and what is saved is the config as
the ingester checked it (normalised), never the text as typed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms
from django.db.models import Q, QuerySet
from django.utils.html import escape
from rest_framework import serializers

from ingest import conf
from ingest.runs import catalogue, ingesters
from ingest.runs.models import Hook, HookTemplate, IngestSource
from tenancy.models import Tenant


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
        kind = self.fields["kind"]
        assert isinstance(kind, forms.ChoiceField)  # declared above
        kind.choices = [("", "---------"), *choices]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        tenant = self.fixed_tenant or getattr(data.get("tenant"), "pk", None) or self.instance.tenant_id
        name = data.get("name")
        if (
            tenant
            and name
            and IngestSource.objects.filter(tenant_id=tenant, name=name).exclude(pk=self.instance.pk).exists()
        ):
            self.add_error("name", f"this tenant already has a source named {name!r}")
        if "config" in data and data["config"] is None:  # left empty
            data["config"] = {}
        if data.get("kind") and "config" in data and tenant:
            data["config"] = self._check_config(data["kind"], data["config"], tenant)
        most = conf.max_batch_records.default  # the check constraint's bound
        if data.get("batch_size") is not None and not 1 <= data["batch_size"] <= most:
            self.add_error("batch_size", f"between 1 and {most}")
        if data.get("max_failures") == 0:
            self.add_error("max_failures", "at least 1")
        return data

    def _check_config(self, kind: str, config: Any, tenant: int) -> Any:
        """``config`` as the ingester normalised it; as given when it is refused (the
        form then has the errors and saves nothing)."""
        if not isinstance(config, dict):
            self.add_error("config", "must be a JSON object")
            return config
        try:
            return ingesters.validate_config(
                kind, config, tenant=Tenant.objects.values_list("slug", flat=True).get(pk=tenant)
            )
        except serializers.ValidationError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
            for line in ingesters.problems(detail.pop("kind", [])):
                self.add_error("kind", line)
            for line in ingesters.problems(detail):
                self.add_error("config", line)
            return config


class HookTemplateForm(forms.ModelForm):
    """A platform operator's catalogue entry, checked by the catalogue's rules field by
    field (the model's validation, ``HookTemplate.clean_fields``): a declaration that is
    wrong is named with what is wrong with it."""

    class Meta:
        model = HookTemplate
        fields = [
            "name",
            "description",
            "enabled",
            "image",
            "command",
            "parameters",
            "env",
            "cpu_request",
            "cpu_limit",
            "memory_request",
            "memory_limit",
            "timeout_seconds",
            "tenants",
        ]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for field, default in (("parameters", []), ("env", {})):
            if field in data and data[field] in (None, ""):
                data[field] = default
        return data


def offered_entries(tenant: int | None) -> QuerySet[HookTemplate]:
    """The entries a source of ``tenant`` may choose (every enabled one when the tenant
    is not known yet: an operator adding a source)."""
    entries = HookTemplate.objects.filter(enabled=True)
    return entries.offered_to(tenant) if tenant is not None else entries


def entries_help(entries: Iterable[HookTemplate], limit: int = 50) -> str:
    """Each entry with its parameters, as the parameters field's help."""
    lines = []
    for entry in list(entries)[:limit]:
        try:
            declared = catalogue.declarations(entry.parameters)
        except catalogue.Refused:
            declared = []
        taken = "; ".join(parameter.summary() for parameter in declared) or "no parameters"
        lines.append(f"{entry.name}: {taken}")
    # The admin writes help text as it is (it may hold markup): escaped here, since an
    # entry's descriptions, choices and patterns are text, not HTML.
    return escape("Parameters by entry — " + (" | ".join(lines) if lines else "no entry is offered"))


class HookForm(forms.ModelForm):
    """A tenant's hook: a catalogue entry offered to the source's tenant, and values that
    fit its parameters. A hook saved unchanged is left as it is, even if its entry no
    longer fits (the run then says why it does not run)."""

    class Meta:
        model = Hook
        fields = ["name", "position", "template", "parameters"]

    def __init__(self, *args: Any, tenant: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        entries = offered_entries(tenant)
        if self.instance.pk and self.instance.template_id:  # its entry, even if withdrawn
            entries = HookTemplate.objects.filter(
                Q(pk__in=entries.values("pk")) | Q(pk=self.instance.template_id)
            )
        template = self.fields["template"]
        assert isinstance(template, forms.ModelChoiceField)  # the foreign key's field
        template.queryset = entries.order_by("name")
        self.fields["parameters"].help_text = entries_help(offered_entries(tenant).order_by("name"))

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("parameters") in (None, ""):
            data["parameters"] = {}
        entry = data.get("template")
        if entry is None or "parameters" in self.errors or (self.instance.pk and not self.has_changed()):
            return data
        if not entry.enabled:
            self.add_error("template", f"entry {entry.name!r} is disabled")
        elif self.tenant is not None and not offered_entries(self.tenant).filter(pk=entry.pk).exists():
            self.add_error("template", f"entry {entry.name!r} is not offered to this tenant")
        else:
            try:
                catalogue.check_hook(entry, data["parameters"])
            except catalogue.Refused as exc:
                for line in exc.problems:
                    self.add_error("parameters", line)
        return data


class HookFormSet(forms.BaseInlineFormSet):
    """A source's hooks, each form told the source's tenant: the staff user's, or the
    source's own (known once the operator's choice of tenant is valid)."""

    fixed_tenant: int | None = None

    def get_form_kwargs(self, index: int | None) -> dict[str, Any]:
        tenant = self.fixed_tenant or self.instance.tenant_id
        return {**super().get_form_kwargs(index), "tenant": tenant}
