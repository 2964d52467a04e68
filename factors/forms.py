"""The admin's upload forms: the same operations as ``/sync/…``, through the services."""

from __future__ import annotations

from django import forms
from django.db.models import QuerySet

from factors.catalog import DataEntryType, ModuleType
from factors.models import CarbonReport


class EntriesUploadForm(forms.Form):
    report = forms.ModelChoiceField(queryset=CarbonReport.objects.none(),
                                    help_text="The carbon report (unit and year).")
    module_type = forms.ChoiceField(label="Module", choices=ModuleType.choices)
    data_entry_type = forms.ChoiceField(label="Data-entry type", choices=DataEntryType.choices)
    file = forms.FileField(help_text="CSV, UTF-8: quantity, unit and the type's classification "
                                     "columns. It replaces the earlier CSV entries of this "
                                     "module and type; manual entries stay.")

    def __init__(self, *args: object, reports: QuerySet[CarbonReport], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["report"].queryset = reports.select_related("unit")  # type: ignore[attr-defined]


class FactorsUploadForm(forms.Form):
    data_entry_type = forms.ChoiceField(label="Data-entry type", choices=DataEntryType.choices)
    file = forms.FileField(help_text="CSV, UTF-8: year, the classification columns, value "
                                     "(kg CO2e per unit), unit, and optionally source. Factors "
                                     "are updated in place; those left out become stale.")


class UnitSyncForm(forms.Form):
    year = forms.IntegerField(min_value=2000, max_value=2100)
    file = forms.FileField(required=False, help_text="A directory file (CSV or JSON) …")
    url = forms.URLField(required=False, label="… or a JSON endpoint", assume_scheme="https",
                         help_text="Left empty with no file: FACTORS_UNITS_URL.")
