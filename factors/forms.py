"""The admin's upload forms: the same operations as ``/sync/…``, through the services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet

from factors import catalog, csv_schemas
from factors.catalog import DataEntryType, ModuleType
from factors.models import CarbonReport


class EntryTypeSelect(forms.Select):
    """The entry types grouped by module, each option carrying its module and its example
    CSV (header and row) for ``factors/upload_form.js``, which offers only the chosen
    module's types and shows the chosen type's example. Without the script the groups
    still say which types a module takes."""

    def create_option(
        self,
        name: str,
        value: Any,
        label: Any,
        selected: Any,
        index: int,
        subindex: int | None = None,
        attrs: dict | None = None,
    ) -> dict[str, Any]:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if value in catalog.SPECS:
            header, example = csv_schemas.entries_example(value)
            option["attrs"].update(
                {
                    "data-module": catalog.SPECS[value].module_type,
                    "data-header": header,
                    "data-example": example,
                }
            )
        return option


def _types_by_module() -> list[tuple[str, list[tuple[str, str]]]]:
    labels = dict(DataEntryType.choices)
    return [
        (module_label, [(t, labels[t]) for t in catalog.types_of(module)])
        for module, module_label in ModuleType.choices
    ]


class EntriesUploadForm(forms.Form):
    report = forms.ModelChoiceField(
        queryset=CarbonReport.objects.none(), help_text="The carbon report (unit and year)."
    )
    module_type = forms.ChoiceField(label="Module", choices=ModuleType.choices)
    data_entry_type = forms.ChoiceField(
        label="Data-entry type", choices=_types_by_module, widget=EntryTypeSelect
    )
    file = forms.FileField(
        help_text="CSV, UTF-8: quantity, unit and the type's classification "
        "columns. It replaces the earlier CSV entries of this "
        "module and type; manual entries stay."
    )

    class Media:
        js = ["factors/upload_form.js"]

    def __init__(self, *args: object, reports: QuerySet[CarbonReport], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["report"].queryset = reports.select_related("unit")  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        """An entry type of another module is refused here, before the file is read."""
        super().clean()
        data = self.cleaned_data
        module, entry_type = data.get("module_type"), data.get("data_entry_type")
        if module and entry_type and catalog.spec(entry_type).module_type != module:
            self.add_error(
                "data_entry_type",
                f"{entry_type} is not an entry type of the {module} "
                f"module: choose one of "
                f"{', '.join(catalog.types_of(module))}",
            )
        return data

    def example(self) -> tuple[str, str]:
        """The example CSV (header, row) of the entry type the select shows: the submitted
        one if it is of the submitted module, else that module's first (the first module's
        on a blank form), as the script leaves it."""
        module = self.data.get("module_type") if self.is_bound else None
        types = catalog.types_of(module if module in ModuleType.values else ModuleType.values[0])
        chosen = self.data.get("data_entry_type") if self.is_bound else None
        return csv_schemas.entries_example(chosen if chosen in types else types[0])


class FactorsUploadForm(forms.Form):
    data_entry_type = forms.ChoiceField(label="Data-entry type", choices=DataEntryType.choices)
    file = forms.FileField(
        help_text="CSV, UTF-8: year, the classification columns, value "
        "(kg CO2e per unit), unit, and optionally source. Factors "
        "are updated in place; those of the file's years that it "
        "leaves out become stale."
    )


class UnitSyncForm(forms.Form):
    year = forms.IntegerField(min_value=2000, max_value=2100)
    file = forms.FileField(required=False, help_text="A directory file (CSV or JSON) …")
    url = forms.URLField(
        required=False,
        label="… or a JSON endpoint",
        assume_scheme="https",
        help_text="Left empty with no file: FACTORS_UNITS_URL.",
    )
