"""``GET /quality/status`` and the freshness rule under it: every row of the rule as the
API answers it on the engine's clock, the rule itself as a property, and who sees what.

The clock stands at 2026-11-02 09:00 UTC (17:00 in Shanghai, the market's Monday).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from drf_spectacular.generators import SchemaGenerator
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import positive_data_acceptance

from market import freshness
from market.models import DailyBar, Dataset, MarketFeed, SourceFreshness
from tests.contract.test_api_contract import CHECKS, connection_kept_open  # noqa: F401
from tests.support.base import as_user, staff

URL = "/quality/status"
STATUSES = {freshness.HEALTHY, freshness.STALE, freshness.ERROR, freshness.NEVER_INGESTED}
HOUR, DAY = timedelta(hours=1), timedelta(days=1)


def feed_of(tenant, name: str = "cn-equities", **fields) -> MarketFeed:
    return MarketFeed.objects.create(
        tenant=tenant, name=name, api_url="http://127.0.0.1:9/", token="t", **fields
    )


def record(
    feed: MarketFeed,
    *,
    success: datetime | None = None,
    failure: datetime | None = None,
    error: str = "",
    datasets=tuple(Dataset.values),
    **fields,
) -> None:
    """The same freshness for each of ``datasets`` of ``feed``."""
    for dataset in datasets:
        SourceFreshness.objects.create(
            feed=feed, dataset=dataset, last_success=success, last_failure=failure, last_error=error, **fields
        )


def answered(answer) -> dict:
    """The body, once the code is the one its status calls for: 503 for an error."""
    assert answer.status_code == (503 if answer.json()["status"] == "error" else 200), answer.content
    return answer.json()


def anonymous() -> dict:
    return answered(APIClient().get(URL))


def seen_by(user) -> dict:
    return answered(as_user(user).get(URL))


# --- the rule, through the API -----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("success", "failure", "expected"),
    [
        pytest.param(HOUR, None, "healthy", id="success-1h-ago"),
        pytest.param(3 * DAY, None, "stale", id="success-3d-ago"),
        pytest.param(8 * DAY, None, "error", id="success-over-7d-ago"),
        pytest.param(2 * HOUR, HOUR, "error", id="failure-after-success"),
        pytest.param(None, HOUR, "error", id="failure-and-no-success"),
        pytest.param(HOUR, 2 * HOUR, "healthy", id="success-after-failure"),
    ],
)
def test_each_row_of_the_rule_is_the_status_the_api_answers(acme, clock, success, failure, expected):
    now = clock.now()
    feed = feed_of(acme)
    record(
        feed,
        success=success and now - success,
        failure=failure and now - failure,
        error="HTTP 503" if failure else "",
    )
    assert anonymous()["status"] == expected
    sources = seen_by(staff("olga", operator=True))["sources"]
    assert [(s["source"], s["status"]) for s in sources] == [
        (dataset, expected) for dataset in Dataset.values
    ]


@pytest.mark.django_db
def test_a_feed_never_ingested_shows_each_dataset_as_never_ingested(acme, clock):
    feed_of(acme)
    body = seen_by(staff("alice", of=acme))
    assert body["status"] == "never_ingested"
    assert body["sources"] == [
        {
            "feed": "cn-equities",
            "source": dataset,
            "status": "never_ingested",
            "last_success": None,
            "last_failure": None,
            "last_error": "",
            "rows_today": 0,
            "old_gaps": 0,
            "message": "",
        }
        for dataset in ["trade_cal", "stock_basic", "daily"]
    ]
    assert anonymous() == {"status": "never_ingested", "checked_at": "2026-11-02T09:00:00Z"}


@pytest.mark.django_db
def test_a_success_is_healthy_for_exactly_48_hours_then_stale(acme, clock):
    record(feed_of(acme), success=clock.now())
    clock.advance(48 * 3600)
    assert anonymous()["status"] == "healthy"
    clock.advance(1)
    assert anonymous()["status"] == "stale"


@pytest.mark.django_db
def test_a_success_is_stale_for_exactly_7_days_then_an_error(acme, clock):
    record(feed_of(acme), success=clock.now())
    clock.advance(7 * 24 * 3600)
    assert anonymous()["status"] == "stale"
    clock.advance(1)
    body = anonymous()
    assert body["status"] == "error"
    assert body["checked_at"] == "2026-11-09T09:00:01Z"  # the clock's, not the machine's


@pytest.mark.django_db
def test_a_source_shows_its_times_its_error_and_only_todays_rows(acme, clock):
    """``rows_today`` counts the market's date (Shanghai): rows of yesterday are not
    today's, even though they are less than 24 hours old; the daily source's are the bars
    of that date."""
    now = clock.now()
    feed = feed_of(acme)
    record(
        feed,
        success=now - 2 * HOUR,
        failure=now - HOUR,
        error="daily: HTTP 503 from the API",
        rows_today=5100,
        rows_date=date(2026, 11, 2),
        datasets=[Dataset.DAILY],
    )
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code=f"{n:06d}.SZ", trade_date=day, open=10, high=11, low=9, close=10)
        for day, count in [(date(2026, 11, 2), 3), (date(2026, 11, 1), 2)]
        for n in range(count)
    )
    record(
        feed, success=now - 10 * HOUR, rows_today=7, rows_date=date(2026, 11, 1), datasets=[Dataset.CALENDAR]
    )
    sources = {s["source"]: s for s in seen_by(staff("alice", of=acme))["sources"]}
    assert sources["daily"] == {
        "feed": "cn-equities",
        "source": "daily",
        "status": "error",
        "last_success": "2026-11-02T07:00:00Z",
        "last_failure": "2026-11-02T08:00:00Z",
        "last_error": "daily: HTTP 503 from the API",
        "rows_today": 3,
        "old_gaps": 0,
        "message": "",
    }
    assert (sources["trade_cal"]["status"], sources["trade_cal"]["rows_today"]) == ("healthy", 0)


# --- the rule itself ---------------------------------------------------------------------

T = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("success", "failure", "expected"),
    [
        (None, None, "never_ingested"),
        (None, T - 30 * DAY, "error"),
        (T - HOUR, T - HOUR + timedelta(microseconds=1), "error"),
        (T - HOUR, T - HOUR, "healthy"),  # a failure at the same instant is not after it
        (T - 48 * HOUR, None, "healthy"),
        (T - 48 * HOUR - timedelta(microseconds=1), None, "stale"),
        (T - 7 * DAY, None, "stale"),
        (T - 7 * DAY - timedelta(microseconds=1), None, "error"),
        (T + HOUR, None, "healthy"),  # a clock skewed ahead is no reason to alarm
    ],
)
def test_status_follows_the_rule_first_match_wins(success, failure, expected):
    assert freshness.status(success, failure, T) == expected


def test_the_overall_status_is_the_worst_and_none_is_never_ingested():
    assert freshness.overall([]) == "never_ingested"
    assert freshness.overall(["healthy", "stale", "healthy"]) == "stale"
    assert freshness.overall(["stale", "never_ingested", "healthy"]) == "never_ingested"
    assert freshness.overall(["never_ingested", "error", "stale"]) == "error"


instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
maybe = st.none() | instants
ages = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=60))


@given(maybe, maybe, instants)
def test_status_is_always_one_of_the_four(success, failure, now):
    assert freshness.status(success, failure, now) in STATUSES


@given(instants, st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=60)), instants)
def test_a_failure_after_the_last_success_is_never_healthy(success, later, now):
    assert freshness.status(success, success + later, now) == "error"


@given(instants, ages, ages)
def test_a_success_only_source_only_gets_worse_as_it_ages(success, first, second):
    younger, older = sorted([first, second])
    assert (
        freshness.SEVERITY[freshness.status(success, None, success + younger)]
        <= freshness.SEVERITY[freshness.status(success, None, success + older)]
    )
    assert freshness.status(success, None, success + older) != "never_ingested"


# --- who sees what -----------------------------------------------------------------------


@pytest.fixture
def two_tenants(acme, globex, clock):
    """Acme's feed healthy; Globex's failing with an error that names its host."""
    now = clock.now()
    record(feed_of(acme, "acme-equities"), success=now - HOUR)
    record(
        feed_of(globex, "globex-futures"),
        success=now - 2 * HOUR,
        failure=now - HOUR,
        error="connect to globex-internal.example:8443 refused",
    )


@pytest.mark.django_db
def test_an_anonymous_caller_gets_the_status_and_nothing_of_any_tenant(two_tenants):
    answer = APIClient().get(URL)
    assert answer.status_code == 503
    assert answer.json() == {"status": "error", "checked_at": "2026-11-02T09:00:00Z"}
    for secret in (b"globex", b"acme", b"refused", b"sources"):
        assert secret not in answer.content


@pytest.mark.django_db
def test_a_tenants_staff_see_only_their_feeds_and_their_own_worst(two_tenants, acme):
    """Globex's failure shows neither in Acme's list nor in Acme's overall status."""
    for user in (staff("alice", of=acme), staff("bob", of=acme, is_staff=False)):
        answer = as_user(user).get(URL)
        assert answer.status_code == 200
        body = answer.json()
        assert {s["feed"] for s in body["sources"]} == {"acme-equities"}
        assert body["status"] == "healthy"
        assert b"globex" not in answer.content


@pytest.mark.django_db
def test_a_platform_operator_sees_every_tenants_feeds_and_the_worst_of_all(two_tenants):
    body = seen_by(staff("olga", operator=True))
    assert body["status"] == "error"
    assert [(s["feed"], s["status"]) for s in body["sources"]] == (
        [("acme-equities", "healthy")] * 3 + [("globex-futures", "error")] * 3
    )
    assert body["sources"][-1]["last_error"] == "connect to globex-internal.example:8443 refused"


@pytest.mark.django_db
def test_a_signed_in_user_of_no_tenant_sees_no_source(two_tenants):
    body = seen_by(staff("mallory"))
    assert body["sources"] == []


@pytest.mark.django_db
def test_the_overall_status_is_the_worst_source(acme, clock):
    now = clock.now()
    feed = feed_of(acme)
    record(feed, success=now - HOUR, datasets=[Dataset.CALENDAR, Dataset.INSTRUMENTS])
    record(feed, success=now - 3 * DAY, datasets=[Dataset.DAILY])
    assert anonymous()["status"] == "stale"
    other = feed_of(acme, "cn-futures")
    assert anonymous()["status"] == "never_ingested"  # three datasets never attempted
    record(other, failure=now - HOUR, error="401", datasets=[Dataset.DAILY])
    assert anonymous()["status"] == "error"


@pytest.mark.django_db
def test_a_disabled_feed_does_not_count(acme, clock):
    record(feed_of(acme), success=clock.now() - HOUR)
    record(feed_of(acme, "retired", enabled=False), failure=clock.now() - HOUR, error="gone")
    assert anonymous()["status"] == "healthy"
    assert {s["feed"] for s in seen_by(staff("olga", operator=True))["sources"]} == {"cn-equities"}


# --- bad requests ------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_a_write_is_405_for_anyone(method, acme, clock):
    for client in (APIClient(), as_user(staff("alice", of=acme))):
        answer = getattr(client, method)(URL, {"status": "healthy"}, format="json")
        assert answer.status_code == 405, answer.content
        assert "GET" in answer["Allow"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "headers", "expected"),
    [
        ({"format": "yaml"}, {}, 404),  # a format the view does not render
        ({}, {"HTTP_ACCEPT": "application/xml"}, 406),
        ({}, {"HTTP_AUTHORIZATION": "Token not-a-token"}, 401),  # a bad token is not anonymous
        ({"feed": "'; DROP TABLE x; --", "status": ["a", "b"], "limit": "-1"}, {}, 200),
    ],
)
def test_a_bad_query_or_header_is_refused_or_ignored_never_a_server_error(
    acme, clock, query, headers, expected
):
    feed_of(acme)
    answer = APIClient().get(URL, query, **headers)
    assert answer.status_code == expected, answer.content
    if expected == 200:
        assert answer.json() == {"status": "never_ingested", "checked_at": "2026-11-02T09:00:00Z"}


@pytest.mark.django_db
def test_a_query_string_that_is_not_even_utf8_is_ignored(acme, clock):
    answer = APIClient().get(URL + "?%ff%fe=%00&format=&status")
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == "never_ingested"


# --- the OpenAPI contract, with real sources ---------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("connection_kept_open")
def test_answers_with_sources_of_every_kind_keep_the_openapi_contract(two_tenants, acme):
    """The contract test's world has no market feed, so its answers never list a source:
    here each identity's answer lists healthy, failing and never-ingested ones (null
    times included) and is checked against the schema the same way."""
    feed_of(acme, "never")
    schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
    schema.app = WSGIHandler()
    operation = schema["/quality/status"]["GET"]
    users = [staff("olga", operator=True), staff("alice", of=acme), staff("mallory")]
    codes = []
    for token in [None, *(Token.objects.create(user=user).key for user in users)]:
        headers = {"Authorization": f"Token {token}"} if token else {}
        case = operation.Case()
        response = case.call(headers=headers)
        codes.append(response.status_code)
        assert ("sources" in response.json()) is (token is not None)
        # A 503 is the documented answer to an error, not a server's failure to answer.
        excluded = [not_a_server_error, positive_data_acceptance] if response.status_code == 503 else []
        case.validate_response(response, checks=CHECKS, excluded_checks=excluded, headers=headers)
    assert codes == [503, 503, 200, 200]  # anyone and olga see Globex's error; alice, mallory do not
