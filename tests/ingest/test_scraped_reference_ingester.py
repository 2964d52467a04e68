"""The scraped-reference ingester refuses what it cannot ingest with a ``SourceError``
that is not transient, so the run's ingester fails at once, saying why."""

from __future__ import annotations

import pytest

from ingest.runs import ingesters
from ingest.runs.errors import SourceError
from ingest.runs.models import IngestSource
from ingest.scraping import services
from ingest.scraping.models import ScrapeReference
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db


@pytest.fixture
def listings(acme) -> IngestSource:
    return builders.source(acme, name="listings", kind="scraped_reference", config={})


def fetch_error(config: dict, session: dict, batch_size: int = 10) -> SourceError:
    with pytest.raises(SourceError) as caught:
        ingesters.get("scraped_reference").fetch(config, session, batch_size, tenant="acme")
    return caught.value


def test_a_session_naming_no_reference_is_a_permanent_source_error():
    error = fetch_error({}, {})
    assert "one reference at a time" in str(error)
    assert error.transient is False


def test_a_reference_that_is_gone_is_a_permanent_source_error():
    error = fetch_error({}, {"reference": 10**9})
    assert str(error) == f"reference {10**9} is gone"
    assert error.transient is False


def test_a_records_field_that_is_no_list_of_objects_is_a_permanent_source_error(listings):
    services.sync(listings, "scrape-1", [{"external_id": "a", "payload": {"items": "none"}}])
    reference = ScrapeReference.objects.get()
    error = fetch_error({"records_field": "items"}, {"reference": reference.pk})
    assert "its payload's 'items' is not a list of objects" in str(error)
    assert error.transient is False


def test_more_records_than_the_batch_size_is_a_permanent_source_error(listings):
    payload = {"items": [{"n": 1}, {"n": 2}, {"n": 3}]}
    services.sync(listings, "scrape-1", [{"external_id": "a", "payload": payload}])
    reference = ScrapeReference.objects.get()
    error = fetch_error({"records_field": "items"}, {"reference": reference.pk}, batch_size=2)
    assert "more than the source's batch size" in str(error)
    assert error.transient is False
