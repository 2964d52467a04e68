"""Failure triage: failures grouped by type and masked error, the masks the same in
PostgreSQL and Python, a group retried after a preview with a reason in each job's
history, and a tenant's staff seeing and retrying only their own tenant's failures."""

from __future__ import annotations

import string

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from console import triage
from jobs.models import Job, JobEvent
from tests.support.base import make_job, staff, tenant
from tests.support.jobs.builders import failed, failed_delivery, grant, messages_of, operator, rows

pytestmark = pytest.mark.django_db

TRIAGE = "admin:jobs_job_triage"
CHANGELIST = "admin:jobs_job_changelist"


def retry_url(group: str, window: str = "24h") -> str:
    return f"{reverse('admin:jobs_job_triage_retry', args=[group])}?window={window}"


def groups_of() -> list[triage.FailureGroup]:
    return triage.groups(Job.objects.all(), triage.window_start("24h"))


# --- the masks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("KeyError: 'row 17'\n  File \"x.py\", line 3", "KeyError: 'row <n>'"),
        (
            "LookupError: tenant 3f2a1b4c-1111-2222-3333-444455556666 has no unit",
            "LookupError: tenant <uuid> has no unit",
        ),
        ("OSError: cannot read /var/data/acme/2026-11-27.csv: denied", "OSError: cannot read <path>: denied"),
        (
            "IntegrityError: object at 0x7f3a2b10 digest 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
            "IntegrityError: object at <hex> digest <hex>",
        ),
        (
            "HandlerTimeout: ran past its time limit of 30 s",
            "HandlerTimeout: ran past its time limit of <n> s",
        ),
        ("", ""),
    ],
)
def test_what_varies_from_job_to_job_is_masked(error, expected):
    assert triage.pattern(error) == expected


# Printable text and a few letters beyond ASCII: what error messages are made of. (Control
# characters are left out: "whitespace" among them is a matter of locale to PostgreSQL.)
ERROR_TEXT = st.text(alphabet=string.printable.replace("\x0b", "").replace("\x0c", "") + "éü€", max_size=120)


@settings(max_examples=60, deadline=None)
@given(error=ERROR_TEXT)
def test_postgresql_masks_an_error_exactly_as_python_does(error):
    job = make_job()
    Job.objects.filter(pk=job.pk).update(last_error=error)
    in_sql = (
        Job.objects.filter(pk=job.pk)
        .annotate(pattern=triage.pattern_expression())
        .annotate(fingerprint=triage.md5_expression())
        .values_list("pattern", "fingerprint")
        .get()
    )
    assert in_sql == (triage.pattern(error), triage.fingerprint(job.type, triage.pattern(error)))
    job.delete()


# --- the groups ----------------------------------------------------------------------------


def test_failures_are_grouped_by_type_and_pattern_biggest_first(clock):
    for row in (17, 90, 3):
        failed(error=f"KeyError: 'row {row}'\nTraceback ...")
    failed(error="KeyError: 'code'")
    failed("tests.record", error="KeyError: 'row 5'")
    make_job()

    found = groups_of()

    assert [(g.type, g.pattern, g.count) for g in found] == [
        ("tests.noop", "KeyError: 'row <n>'", 3),
        ("tests.noop", "KeyError: 'code'", 1),
        ("tests.record", "KeyError: 'row <n>'", 1),
    ]
    biggest = found[0]
    assert biggest.first_seen <= biggest.last_seen
    assert biggest.sample.last_error.startswith("KeyError: 'row 3'")  # the newest


def test_a_group_counts_the_tenants_it_touched_and_leaves_old_failures_out(clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    failed(error="ValueError: 1", tenant=acme)
    clock.advance(2 * 86400)
    failed(error="ValueError: 2", tenant=acme)
    failed(error="ValueError: 3", tenant=globex)
    failed(error="ValueError: 4")

    (group,) = groups_of()

    assert (group.count, group.tenants) == (3, 2)


def test_the_triage_page_lists_the_groups_with_their_tracebacks(admin_client, clock):
    job = failed(error="KeyError: 'row 17'\n  File \"handlers.py\", line 9, in run")

    page = admin_client.get(reverse(TRIAGE)).content.decode()

    assert "KeyError: &#x27;row &lt;n&gt;&#x27;" in page
    assert "handlers.py" in page  # the newest failure's traceback
    assert reverse("admin:jobs_job_change", args=[job.pk]) in page
    assert "Retry 1 job<" in page


def test_an_unknown_window_falls_back_to_a_day_and_says_so(admin_client, clock):
    failed(error="ValueError: 1")
    response = admin_client.get(reverse(TRIAGE), {"window": "forever"})
    assert response.status_code == 200
    assert response.context["window"] == "24h"
    assert any("Unknown window" in m for m in messages_of(response))


def test_the_group_count_lists_exactly_the_groups_jobs(admin_client, clock):
    members = [failed(error=f"KeyError: 'row {n}'") for n in (1, 2)]
    failed(error="KeyError: 'code'")
    (group, _) = groups_of()

    response = admin_client.get(reverse(CHANGELIST), {"failure": f"24h:{group.fingerprint}"})

    assert sorted(rows(response)) == sorted(job.pk for job in members)


@pytest.mark.parametrize("value", ["forever:" + "0" * 32, "24h:short", "nonsense"])
def test_a_malformed_group_filter_is_refused_not_a_500(admin_client, value):
    response = admin_client.get(reverse(CHANGELIST), {"failure": value})
    assert response.status_code == 302 and "e=1" in response["Location"]


# --- retrying a group ---------------------------------------------------------------------


def test_retrying_a_group_previews_then_retries_each_job_with_the_reason(client, clock):
    members = [failed(error=f"ConnectionError: host 10.0.0.{n} refused") for n in (1, 2, 3)]
    other = failed(error="KeyError: 'code'")
    user = operator()
    client.force_login(user)
    group = next(g for g in groups_of() if g.count == 3)

    preview = client.get(retry_url(group.fingerprint))
    assert preview.status_code == 200
    assert preview.context["touch"] == 3
    assert {job.pk for job in preview.context["preview"]} == {job.pk for job in members}
    # Jobs that work for nothing with a retry of its own: no warning.
    assert preview.context["own_retries"] == [] and 'id="triage-own-retry"' not in preview.content.decode()

    response = client.post(retry_url(group.fingerprint), {"reason": "the host is back"})

    assert response.status_code == 302
    for job in members:
        job.refresh_from_db()
        assert job.state == Job.State.PENDING and job.attempts == 0
        event = job.events.get(kind=JobEvent.Kind.RETRIED)
        assert event.actor == user
        assert "the host is back" in event.message and "ConnectionError" in event.message
        assert LogEntry.objects.filter(object_id=str(job.pk), user=user).exists()
    other.refresh_from_db()
    assert other.state == Job.State.FAILED


def test_a_group_is_not_retried_without_a_reason(client, clock):
    job = failed(error="ValueError: 1")
    client.force_login(operator())
    (group,) = groups_of()

    response = client.post(retry_url(group.fingerprint), {"reason": "  "})

    assert response.status_code == 200
    assert any("Say why" in m for m in messages_of(response))
    job.refresh_from_db()
    assert job.state == Job.State.FAILED


def test_a_group_already_retried_is_a_404_not_a_second_retry(client, clock):
    failed(error="ValueError: 1")
    client.force_login(operator())
    (group,) = groups_of()
    client.post(retry_url(group.fingerprint), {"reason": "fixed"})

    assert client.post(retry_url(group.fingerprint), {"reason": "again"}).status_code == 404
    assert client.get(retry_url("f" * 32)).status_code == 404


def test_a_view_only_user_sees_groups_but_cannot_retry_them(client, clock):
    failed(error="ValueError: 1")
    viewer = grant(staff("vera", operator=True), "view_job")
    client.force_login(viewer)
    (group,) = groups_of()

    page = client.get(reverse(TRIAGE)).content.decode()

    assert "ValueError" in page and "retry-group" not in page
    assert client.post(retry_url(group.fingerprint), {"reason": "x"}).status_code == 403


def test_a_tenants_staff_see_and_retry_only_their_tenants_failures(client, clock):
    acme, globex = tenant("Acme"), tenant("Globex")
    mine = failed(error="ValueError: 1", tenant=acme)
    theirs = failed(error="ValueError: 2", tenant=globex)
    user = grant(staff("alice", of=acme), "view_job", "operate_job", "operate_delivery")
    client.force_login(user)

    (group,) = client.get(reverse(TRIAGE)).context["rows"]
    assert group["group"].count == 1 and group["group"].sample.pk == mine.pk
    client.post(retry_url(group["group"].fingerprint), {"reason": "fixed"})

    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.state, theirs.state) == (Job.State.PENDING, Job.State.FAILED)


def test_a_failure_arriving_after_the_preview_is_not_retried_unseen(client, clock):
    seen = failed(error="ValueError: 1")
    client.force_login(operator())
    (group,) = groups_of()
    preview = client.get(retry_url(group.fingerprint))
    upto = preview.context["upto"]
    late = failed(error="ValueError: 2")  # the same group, after the preview

    client.post(retry_url(group.fingerprint), {"reason": "fixed", "upto": upto})

    seen.refresh_from_db()
    late.refresh_from_db()
    assert (seen.state, late.state) == (Job.State.PENDING, Job.State.FAILED)


def test_a_job_that_cannot_be_retried_is_counted_with_its_reason(client, clock):
    first = failed(error="ValueError: 1", unique_key="daily")
    make_job(unique_key="daily")  # holds the key now: the failed one cannot be pending again
    client.force_login(operator())
    (group,) = groups_of()

    response = client.post(retry_url(group.fingerprint), {"reason": "fixed"}, follow=True)

    first.refresh_from_db()
    assert first.state == Job.State.FAILED
    assert any(
        m.startswith("1 job(s) left alone:") and "unique key 'daily'" in m for m in messages_of(response)
    )


def test_a_quarantined_deliverys_job_is_not_in_any_group(clock):
    from jobs import outbox

    delivery = failed_delivery()
    assert [g.count for g in groups_of()] == [1]
    outbox.quarantine(delivery, None, "poison")
    assert groups_of() == []


def test_the_groups_are_made_of_the_newest_failures_and_more_than_says_when_more_failed(clock):
    for n in range(3):
        failed(error=f"KeyError: 'old {n}'")
    clock.advance(60)
    failed(error="ValueError: newest")
    jobs = Job.objects.all()
    since = triage.window_start("24h")

    (group,) = triage.groups(jobs, since, newest=1)

    assert group.pattern == "ValueError: newest" and triage.more_than(jobs, since, newest=1)
    assert not triage.more_than(jobs, since)
