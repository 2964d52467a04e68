"""The composite foreign keys of references and handoffs: a reference belongs to its
source's tenant, a handoff to its reference's source and tenant, checked by PostgreSQL
whatever writes the row."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from ingest.scraping import services
from ingest.scraping.models import IngestionHandoff, ScrapeReference
from tests.support.base import tenant
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db


@pytest.fixture
def synced(acme):
    source = builders.source(acme, name="listings", kind="scraped_reference", config={})
    services.sync(source, "run-1", [{"external_id": "a", "payload": {"v": 1}}])
    return source


def checked(statement: str, params: list) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def test_a_reference_cannot_name_another_tenants_tenant(synced):
    other = tenant("Globex")
    with pytest.raises(IntegrityError, match="ingest_handoff_reference_of_source"):
        checked("UPDATE ingest_scrapereference SET tenant_id = %s", [other.pk])  # its handoff's
    IngestionHandoff.objects.all().delete()
    with pytest.raises(IntegrityError, match="ingest_reference_source_of_tenant"):
        checked("UPDATE ingest_scrapereference SET tenant_id = %s", [other.pk])


def test_a_handoff_cannot_name_another_source_than_its_references(synced, acme):
    elsewhere = builders.source(acme, name="elsewhere", kind="scraped_reference", config={})
    with pytest.raises(IntegrityError, match="ingest_handoff_reference_of_source"):
        checked("UPDATE ingestion_handoffs SET source_id = %s", [elsewhere.pk])


def test_a_handoff_cannot_name_a_reference_that_is_not_there(synced):
    missing = ScrapeReference.objects.order_by("-pk").first().pk + 1
    with pytest.raises(IntegrityError, match="ingest_handoff_reference_of_source"):
        checked("UPDATE ingestion_handoffs SET reference_id = %s", [missing])
    assert IngestionHandoff.objects.filter(reference__external_id="a").count() == 1
