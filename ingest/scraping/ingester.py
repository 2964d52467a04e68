"""The ingester of a scraped reference: its ingest run's records are its payload.

A source of kind ``scraped_reference`` is what the scraper syncs to. Each handoff's ingest
run starts from the session ``{"reference": id}`` and fetches, in one batch, the
reference's current payload: as one record, or, with ``records_field``, the objects of
the list the payload holds under that field (a listing page's items, say).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ingest.runs.errors import SourceError
from ingest.runs.ingesters.base import Fetched, Ingester, register
from ingest.runs.ingesters.config import StrictConfig
from ingest.scraping.models import ScrapeReference


class ScrapedReferenceConfig(StrictConfig):
    records_field = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Ingest the objects of the payload's list under this field, not the payload.",
    )


@register
class ScrapedReference(Ingester):
    kind = "scraped_reference"
    label = "Scraped references (POST /scraping/{source}/sync)"
    config_serializer = ScrapedReferenceConfig

    def fetch(
        self, config: dict[str, Any], session: dict[str, Any], batch_size: int, *, tenant: str
    ) -> Fetched:
        reference_id = session.get("reference")
        if not isinstance(reference_id, int):
            raise SourceError(
                "a scraped-reference source is ingested one reference at a time, "
                "through its handoffs; start it from a sync, not as a whole",
                transient=False,
            )
        reference = ScrapeReference.objects.filter(pk=reference_id).first()
        if reference is None:
            raise SourceError(f"reference {reference_id} is gone", transient=False)
        field = config.get("records_field") or ""
        if not field:
            return Fetched([reference.payload], {}, False)
        items = reference.payload.get(field)
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise SourceError(
                f"reference {reference.external_id!r}: its payload's {field!r} is not a list of objects",
                transient=False,
            )
        if len(items) > batch_size:
            raise SourceError(
                f"reference {reference.external_id!r}: {len(items):,} records "
                f"under {field!r}, more than the source's batch size "
                f"({batch_size:,})",
                transient=False,
            )
        return Fetched(items, {}, False)
