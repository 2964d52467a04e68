"""The pipeline page: the graph of a pipeline's jobs (chained children under their parent,
the jobs a fan-in waited for under it), the buttons each state allows, the fragment
the page's script reloads, and who may see what."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import reverse

from console.admin.pipeline import MAX_JOBS
from jobs import engine
from jobs.models import Job
from jobs.pipelines import summary as pipeline_state
from tests.support.base import claim_one, make_job, run_next, staff, tenant
from tests.support.jobs.builders import grant, operator

pytestmark = pytest.mark.django_db

State = Job.State


def page_url(pipeline: uuid.UUID | str) -> str:
    return reverse("admin:jobs_job_pipeline", args=[pipeline])


def graph_url(pipeline: uuid.UUID | str) -> str:
    return reverse("admin:jobs_job_pipeline_graph", args=[pipeline])


def box(html: str, job: Job) -> str:
    """The HTML of one job's box (up to the next box or the end)."""
    start = html.rindex('<div class="pl-job ', 0, html.index(f'id="job-{job.pk}"'))
    following = html.find('<div class="pl-job ', start + 1)
    return html[start : following if following > 0 else len(html)]


def visible_buttons(html: str, job: Job) -> list[str]:
    return re.findall(r'data-op="(\w+)"[^>]*formaction="[^"]+"(?!\s*hidden)>', box(html, job))


def ingest_with_chunks() -> tuple[Job, Job, list[Job]]:
    """An ingest, two chunk recalculations queued while it ran (no parent) and the closing
    recalculation chained to it, waiting for the chunks; plus a job of another pipeline."""
    ingest = make_job("tests.noop")
    chunks = [make_job("tests.noop", {"n": n}, pipeline=ingest.pipeline_id) for n in range(2)]
    closing = make_job(
        "tests.noop", {"closes": ingest.pk}, pipeline=ingest.pipeline_id, parent=ingest, after=chunks
    )
    make_job("tests.noop")
    return ingest, closing, chunks


def test_the_graph_puts_children_under_their_parent_and_a_fan_ins_jobs_under_it(admin_client):
    ingest, closing, chunks = ingest_with_chunks()

    response = admin_client.get(page_url(ingest.pipeline_id))

    assert response.status_code == 200
    graph = response.context["graph"]
    [root] = graph.roots
    assert root.job.pk == ingest.pk
    [node] = root.children
    assert node.job.pk == closing.pk
    assert node.waits_for == [chunk.pk for chunk in chunks]
    assert [below.job.pk for below in node.prerequisites] == [chunk.pk for chunk in chunks]
    html = response.content.decode()
    assert html.count('class="pl-job ') == 4
    assert f"after 2 jobs: #{chunks[0].pk}, #{chunks[1].pk}" in html
    assert 'class="pl-fan-in"' in html


def test_a_fan_in_on_its_own_ancestor_leaves_that_job_where_it_is(admin_client):
    parent = make_job("tests.noop")
    child = make_job("tests.noop", parent=parent, pipeline=parent.pipeline_id, after=[parent])

    [root] = admin_client.get(page_url(parent.pipeline_id)).context["graph"].roots

    assert root.job.pk == parent.pk
    assert [node.job.pk for node in root.children] == [child.pk]
    assert root.children[0].prerequisites == []


def test_a_job_whose_parent_is_in_another_pipeline_is_a_root(admin_client):
    parent = make_job("tests.noop")
    child = make_job("tests.noop", parent=parent)  # its own pipeline

    graph = admin_client.get(page_url(child.pipeline_id)).context["graph"]

    assert [node.job.pk for node in graph.roots] == [child.pk]


def test_each_box_shows_state_progress_attempts_and_last_error(admin_client):
    job = make_job("tests.noop", max_attempts=3)
    claimed, _ = claim_one()
    engine.fail(claimed, claimed.lease_token, "disk full", permanent=True, worker="w1")
    Job.objects.filter(pk=job.pk).update(
        progress_done=2_500, progress_total=10_000, progress_message="batch 1"
    )

    html = box(admin_client.get(page_url(job.pipeline_id)).content.decode(), job)

    assert 'class="pl-job pl-failed"' in html and 'data-state="failed"' in html
    assert 'data-percent="25.0"' in html and "2,500/10,000 (25%) · batch 1" in html
    assert '<dd class="pl-attempts">1/3</dd>' in html
    assert "disk full" in html


def test_the_buttons_shown_are_those_the_jobs_state_allows(admin_client):
    pending = make_job("tests.noop")
    done = make_job("tests.noop", pipeline=pending.pipeline_id, priority=-1)
    failed = make_job("tests.permanent", pipeline=pending.pipeline_id, priority=-2)
    Job.objects.filter(pk=pending.pk).update(priority=-3)  # run the other two first
    run_next(), run_next()

    html = admin_client.get(page_url(pending.pipeline_id)).content.decode()

    assert visible_buttons(html, pending) == ["recover", "cancel", "run_now"]
    assert visible_buttons(html, done) == []
    assert visible_buttons(html, failed) == ["retry"]
    # The hidden ones are there for the script to show when the state changes.
    assert box(html, done).count('class="button pl-op"') == 4


def test_staff_who_may_only_view_get_no_buttons(client):
    job = make_job("tests.noop")
    client.force_login(grant(staff("vera", operator=True), "view_job"))

    html = client.get(page_url(job.pipeline_id)).content.decode()

    assert 'id="job-' in html and "pl-op" not in html


def test_the_buttons_post_back_to_the_pipeline_page_or_answer_a_script_in_json(admin_client):
    job = make_job("tests.noop")
    cancel = reverse("admin:jobs_job_cancel", args=[job.pk])

    response = admin_client.post(cancel, {"next": page_url(job.pipeline_id)})
    assert response.status_code == 302 and response.url == page_url(job.pipeline_id)

    retry = reverse("admin:jobs_job_retry", args=[job.pk])
    answer = admin_client.post(retry, HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    assert answer.json() == {"job": job.pk, "ok": True, "message": f"Job {job.pk} retried."}
    refused = admin_client.post(retry, HTTP_ACCEPT="application/json")
    assert refused.status_code == 409 and refused.json()["ok"] is False


def test_an_unsafe_next_is_ignored(admin_client):
    job = make_job("tests.noop")

    response = admin_client.post(
        reverse("admin:jobs_job_cancel", args=[job.pk]), {"next": "https://evil.example/"}
    )

    assert response.url == reverse("admin:jobs_job_change", args=[job.pk])


def test_the_page_starts_the_stream_after_the_newest_event_it_shows(admin_client):
    job = make_job("tests.noop")
    run_next()
    newest = job.events.order_by("-id").first().pk

    html = admin_client.get(page_url(job.pipeline_id)).content.decode()

    assert f'data-events-url="/sync/pipelines/{job.pipeline_id}/events"' in html
    assert f'data-last-event="{newest}"' in html and 'data-finished="1"' in html
    assert f'data-event="{newest}"' in box(html, job)
    assert "console/pipeline.js" in html


def test_the_graph_fragment_is_the_graph_alone(admin_client):
    ingest, closing, _ = ingest_with_chunks()

    response = admin_client.get(graph_url(ingest.pipeline_id))

    html = response.content.decode()
    assert html.lstrip().startswith('<div id="pipeline-graph"')
    assert f'id="job-{closing.pk}"' in html and "<html" not in html


def test_a_huge_pipeline_draws_its_first_jobs_only(admin_client):
    pipeline = uuid.uuid4()
    engine.enqueue_many("tests.noop", [{}] * (MAX_JOBS + 5), pipeline=pipeline)

    graph = admin_client.get(page_url(pipeline)).context["graph"]

    assert graph.truncated and len(graph.jobs) == MAX_JOBS


def test_an_unknown_pipeline_is_not_found(admin_client):
    assert admin_client.get(page_url(uuid.uuid4())).status_code == 404
    assert admin_client.get(graph_url(uuid.uuid4())).status_code == 404


def test_anonymous_visitors_are_sent_to_the_login_page(client):
    job = make_job("tests.noop")

    response = client.get(page_url(job.pipeline_id))

    assert response.status_code == 302 and "/login/" in response.url


def test_staff_without_the_view_permission_are_refused(client):
    job = make_job("tests.noop")
    client.force_login(staff("nora", operator=True))

    assert client.get(page_url(job.pipeline_id)).status_code == 403


def test_another_tenants_pipeline_is_not_found(client):
    acme, globex = tenant("Acme"), tenant("Globex")
    client.force_login(grant(staff("alice", of=acme), "view_job", "operate_job", "operate_delivery"))
    theirs = make_job("tests.noop", {"secret": "globex-data"}, tenant=globex)
    ours = make_job("tests.noop", tenant=acme)

    assert client.get(page_url(theirs.pipeline_id)).status_code == 404
    assert client.get(graph_url(theirs.pipeline_id)).status_code == 404
    assert client.get(page_url(ours.pipeline_id)).status_code == 200


def test_a_shared_pipeline_shows_a_tenant_only_its_own_jobs(client):
    acme, globex = tenant("Acme"), tenant("Globex")
    ours = make_job("tests.noop", tenant=acme)
    theirs = make_job("tests.noop", tenant=globex, pipeline=ours.pipeline_id)
    client.force_login(operator("olga"))
    assert len(client.get(page_url(ours.pipeline_id)).context["graph"].jobs) == 2

    client.force_login(grant(staff("alice", of=acme), "view_job"))
    html = client.get(page_url(ours.pipeline_id)).content.decode()

    assert f'id="job-{ours.pk}"' in html and f'id="job-{theirs.pk}"' not in html


def test_the_job_list_and_job_page_link_to_the_pipeline_page(admin_client):
    job = make_job("tests.noop")

    listing = admin_client.get(reverse("admin:jobs_job_changelist")).content.decode()
    detail = admin_client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()

    assert page_url(job.pipeline_id) in listing and page_url(job.pipeline_id) in detail
    assert "console/job_list.js" in listing and "console/states.css" in listing


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (["succeeded", "pending"], "running"),
        (["succeeded", "failed", "cancelled"], "failed"),
        (["succeeded", "cancelled"], "cancelled"),
        (["succeeded"], "succeeded"),
    ],
)
def test_the_pipelines_state_is_running_until_every_job_finished(states, expected):
    assert pipeline_state(states) == expected


def test_many_chunks_are_folded_with_the_failures_first_and_in_view(admin_client):
    ingest = make_job("tests.noop")
    chunks = [make_job("tests.noop", {"n": n}, pipeline=ingest.pipeline_id) for n in range(41)]
    closing = make_job(
        "tests.noop", {"closes": ingest.pk}, pipeline=ingest.pipeline_id, parent=ingest, after=chunks
    )
    broken = chunks[30]
    for _ in range(1 + len(chunks)):  # the ingest, then every chunk: one fails, the rest succeed
        job, _ = claim_one("w1")
        if job.pk == broken.pk:
            engine.fail(job, job.lease_token, "ValueError: no factor", permanent=True, worker="w1")
        else:
            engine.complete(job, job.lease_token, worker="w1")

    html = admin_client.get(page_url(ingest.pipeline_id)).content.decode()

    fan_in = html[html.index('class="pl-fan-in"') :]
    in_view, _, folded = fan_in.partition("<details>")
    assert re.findall(r'id="job-(\d+)"', in_view)[0] == str(broken.pk)  # the failure leads
    assert len(re.findall(r'class="pl-job ', in_view)) == 8
    assert "33 more:" in folded and "33 succeeded" in folded
    assert html.count('class="pl-job ') == 43  # folded boxes stay, for the live updates
    assert f'id="job-{closing.pk}"' in html
