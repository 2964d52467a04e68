"""A source for the pipeline's tests, registered as any project's own ingester would be:
``batches`` batches of ``size`` numbered records, optionally failing at one batch."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ingest.runs.errors import SourceError
from ingest.runs.ingesters.base import Fetched, Ingester, register


class CountingConfig(serializers.Serializer):
    batches = serializers.IntegerField(min_value=1, max_value=10_000)
    size = serializers.IntegerField(min_value=0, max_value=10_000, default=2)
    fail_at = serializers.IntegerField(min_value=1, required=False)
    transient = serializers.BooleanField(default=False)


@register
class Counting(Ingester):
    kind = "test_counting"
    label = "Numbered records (tests)"
    config_serializer = CountingConfig

    def fetch(
        self, config: dict[str, Any], session: dict[str, Any], batch_size: int, *, tenant: str
    ) -> Fetched:
        number = session.get("next", 1)
        if config.get("fail_at") == number:
            raise SourceError(f"the source refused batch {number}", transient=config.get("transient", False))
        size = config.get("size", 2)
        records = [{"id": f"{number}-{index}", "batch": number} for index in range(size)]
        return Fetched(records=records, session={"next": number + 1}, has_more=number < config["batches"])
