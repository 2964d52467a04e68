"""What an API client may ask of the CO2 calculator's jobs through ``POST /api/jobs/``.

Only two of its job types are open to API clients, both harmless to repeat and both
limited to the caller's tenant: recomputing a module's stats, and recalculating a
module's emissions. Uploads, factor and unit syncs have endpoints of their own
(``/sync/…``), which validate the file and stage it on the server; their job types take
no payload from a client.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

import jobs
from factors import catalog
from factors.models import ReportModule

MODULE_TENANT = "report__unit__tenant"


class AggregationPayload(jobs.ApiPayload):
    module = jobs.TenantObject(
        queryset=ReportModule.objects.all(),
        tenant_path=MODULE_TENANT,
        help_text="A module of the job's tenant.",
    )


class RecalculationPayload(jobs.ApiPayload):
    data_entry_type = serializers.ChoiceField(choices=catalog.DataEntryType.choices)
    module = jobs.TenantObject(
        queryset=ReportModule.objects.all(),
        tenant_path=MODULE_TENANT,
        required=False,
        allow_null=True,
        help_text="Required for a tenant's job; platform jobs may recalculate every module of the type.",
    )
    years = serializers.ListField(
        child=serializers.IntegerField(min_value=2000, max_value=2100),
        required=False,
        max_length=20,
        default=list,
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        module = attrs.get("module")
        if module is None and self.tenant_id is not None:
            raise serializers.ValidationError(
                {"module": ["a tenant's recalculation covers one of its modules; name it"]}
            )
        spec = catalog.spec(attrs["data_entry_type"])
        if module is not None and module.module_type != spec.module_type:
            raise serializers.ValidationError(
                {
                    "data_entry_type": [
                        f"{spec.type} entries belong to the {spec.module_type} module, not "
                        f"{module.module_type}"
                    ]
                }
            )
        return attrs
