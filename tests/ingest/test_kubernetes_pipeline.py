"""Runs whose hooks are Kubernetes Jobs, through the official client, against the fake
API server on the engine's clock: the labels and manifests the cluster gets, failures
sorted and backed off, and a full cluster pressed no harder than the backoff and the
breaker allow."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.test import override_settings

import jobs
from devtools.fakes.kubernetes import Behaviour, FakeCluster
from ingest.runs import breaker, runners, services
from ingest.runs.models import (
    LIVE_EXECUTIONS,
    BatchStatus,
    BreakerState,
    ExecutionStatus,
    HookExecution,
    HookTemplate,
    IngestRun,
    RunnerBreaker,
    RunStatus,
)
from jobs.models import Job, JobEvent
from jobs.testing import T0
from tests.support.base import tenant
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)

IMAGE = "registry.example/hooks:1"


@pytest.fixture
def cluster(clock, tmp_path):
    with FakeCluster(clock=clock.now) as fake:
        config = fake.kubeconfig(tmp_path / "kubeconfig")
        with override_settings(
            INGEST_HOOK_RUNNER="kubernetes",
            INGEST_KUBECONFIG=str(config),
            INGEST_KUBE_NAMESPACE=fake.namespace,
            INGEST_KUBE_REQUEST_TIMEOUT_SECONDS=5,
        ):
            yield fake


def test_hooks_run_as_labelled_jobs_and_the_run_succeeds(clock, cluster):
    acme = tenant("Acme")
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=5, log="checked 2 records\n")
    run = services.start_ingest(builders.source(acme, batches=2, hooks=[["check"]]))
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.failure_reason
    execution = HookExecution.objects.filter(batch__run=run).order_by("batch__sequence").first()
    assert execution.runner_ref == f"conveyor-hook-{execution.pk}-1"
    assert (execution.pod_phase, execution.exit_code) == ("Succeeded", 0)
    assert "checked 2 records" in execution.log_tail
    manifest = cluster.received_jobs[0]
    labels = manifest["metadata"]["labels"]
    assert labels["conveyor.io/run"] == str(run.pk)
    assert labels["conveyor.io/batch"] == "1"
    assert labels["conveyor.io/tenant"] == "acme"
    assert manifest["spec"]["ttlSecondsAfterFinished"] == 3600
    env = {e["name"]: e["value"] for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["INGEST_BATCH_URL"].endswith(run.batches.get(sequence=1).location)
    assert cluster.create_calls == 2


def test_a_hook_that_exits_non_zero_keeps_its_code_and_log(clock, cluster):
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=3, exit_code=3, log="row 7: no price\n")
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]], max_failures=1))
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    execution = HookExecution.objects.get(batch__run=run)
    assert (execution.exit_code, execution.pod_phase) == (3, "Failed")
    assert "row 7: no price" in execution.log_tail


def test_an_image_that_cannot_be_pulled_fails_the_hook_at_once(clock, cluster):
    cluster.behaviours[IMAGE] = Behaviour(pull_error=True)
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]], max_failures=1))
    drain(clock)
    run.refresh_from_db()
    execution = HookExecution.objects.get(batch__run=run)
    assert "ErrImagePull" in execution.reason or "ImagePullBackOff" in execution.reason
    delivery = Job.objects.get(pipeline_id=run.pipeline, type="ingest.RunHooks")
    assert (delivery.state, delivery.attempts) == ("failed", 1)
    assert run.status == RunStatus.FAILED
    assert cluster.create_calls == 1


@pytest.mark.parametrize(
    "status, message",
    [
        (
            422,
            'Job.batch "x" is invalid: spec.template.spec.containers[0].resources.requests: '
            'Invalid value: "4Gi": must be less than or equal to memory limit of 512Mi',
        ),
        (403, 'pods "x" is forbidden: violates PodSecurity "restricted:latest": privileged'),
    ],
)
def test_a_job_refused_as_invalid_or_by_policy_fails_its_hook_and_the_breaker_counts_nothing(
    clock, cluster, status, message
):
    cluster.refuse_creates(status, message)
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]]))
    drain(clock)
    execution = HookExecution.objects.get(batch__run=run)
    assert str(status) in execution.reason and execution.tries == 1
    delivery = Job.objects.get(pipeline_id=run.pipeline, type="ingest.RunHooks")
    assert (delivery.state, delivery.attempts) == ("failed", 1)
    assert not RunnerBreaker.objects.filter(failures__gt=0).exists()
    assert cluster.create_calls == 1


def test_a_pod_refused_by_an_admission_policy_fails_its_hook_and_the_breaker_counts_nothing(clock, cluster):
    cluster.refuse_pods(
        'admission webhook "images.policy.example" denied the request: image '
        f'"{IMAGE}" is not from an allowed registry'
    )
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]]))
    drain(clock)
    execution = HookExecution.objects.get(batch__run=run)
    assert "denied the request" in execution.reason and execution.tries == 1
    assert not RunnerBreaker.objects.filter(failures__gt=0).exists()
    assert cluster.jobs() == []


@override_settings(INGEST_BREAKER_THRESHOLD=1000)
def test_a_busy_api_is_retried_after_min_60s_2_to_the_n_capped_at_5_minutes(clock, cluster):
    cluster.refuse_creates(503, "the server is currently unable to handle the request")
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]], max_failures=1))
    jobs.run_until_idle()
    delays = []
    for _ in range(6):
        delivery = Job.objects.get(pipeline_id=run.pipeline, type="ingest.RunHooks")
        if delivery.state != "pending":
            break
        delays.append(round((delivery.run_after - clock.now()).total_seconds()))
        clock.advance(delays[-1] + 0.001)
        jobs.run_until_idle()
    assert delays == [60, 120, 240, 300, 300]
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("failed", 6)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "gave up after 6 attempts" in run.failure_reason
    assert cluster.create_calls == 6


def _finish_order() -> dict[str, list]:
    order = defaultdict(list)
    for slug, published in IngestRun.objects.filter(batches__status=BatchStatus.PUBLISHED).values_list(
        "tenant__slug", "batches__published_at"
    ):
        order[slug].append(published)
    return {slug: sorted(times) for slug, times in order.items()}


@override_settings(
    INGEST_HOOK_POLL_SECONDS=10, INGEST_KUBE_SCHEDULE_TIMEOUT_SECONDS=60, INGEST_QUEUE_WAIT_SECONDS=30
)
def test_a_full_cluster_is_pressed_no_harder_than_backoff_and_breaker_allow(clock, cluster):
    """20 runs × 10 batches from 3 tenants on a cluster with room for 2 hooks."""
    cluster.capacity = 2
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=5, create_seconds=1)
    tenants = [tenant(name) for name in ("Acme", "Globex", "Initech")]
    runs = [
        services.start_ingest(
            builders.source(tenants[n % 3], f"feed{n}", batches=10, hooks=[["check"]], max_failures=200)
        )
        for n in range(20)
    ]
    drain(clock)
    finished = {run.status for run in IngestRun.objects.filter(pk__in=[r.pk for r in runs])}
    assert finished == {RunStatus.SUCCEEDED}
    batches = 200
    tries = HookExecution.objects.filter(batch__run__in=runs).values_list("tries", flat=True)
    assert sum(tries) == cluster.create_calls
    # Each batch's hook is created once, plus once per try the cluster had no room for:
    # at most max_attempts - 1 of those per batch, and in fact far fewer.
    assert batches <= cluster.create_calls <= batches * 6
    breakers = RunnerBreaker.objects.aggregate(opened=Sum("times_opened"), held=Sum("denied"))
    assert RunnerBreaker.objects.count() == 3  # one per tenant on the cluster
    print(
        f"creates={cluster.create_calls} opened={breakers['opened']} "
        f"held={breakers['held']} minutes={(clock.now() - T0) / timedelta(minutes=1):.1f}"
    )
    order = _finish_order()
    last = {slug: times[-1] for slug, times in order.items()}
    for slug, times in order.items():
        for other, other_last in last.items():
            if other != slug:
                assert times[0] < other_last, f"{slug} waited for all of {other}'s batches"


@override_settings(INGEST_KUBE_SCHEDULE_TIMEOUT_SECONDS=60)
# With the breaker, creates are paced by its probes, not by how many hooks wait behind it:
# runs of 4 batches (more than their 3 allowed failures) make as many creates over as many
# minutes as runs of 10, whose held hooks only add deliveries that snooze again. Without
# it every waiting hook presses the API, so there the runs stay at 10 batches.
@pytest.mark.parametrize(("threshold", "batches"), [(5, 4), (1_000_000, 10)], ids=["breaker", "no breaker"])
def test_a_cluster_that_refuses_everything_fails_runs_by_max_failures_without_a_busy_loop(
    clock, cluster, threshold, batches
):
    cluster.refuse_creates(
        403,
        'jobs.batch "x" is forbidden: exceeded quota: hooks, '
        "requested: count/jobs.batch=1, used: count/jobs.batch=50, "
        "limited: count/jobs.batch=50",
    )
    start = clock.now()
    with override_settings(INGEST_BREAKER_THRESHOLD=threshold):
        runs = [
            services.start_ingest(
                builders.source(
                    tenant("Acme"), f"feed{n}", batches=batches, hooks=[["check"]], max_failures=3
                )
            )
            for n in range(5)
        ]
        drain(clock)
    minutes = (clock.now() - start) / timedelta(minutes=1)
    for run in IngestRun.objects.filter(pk__in=[r.pk for r in runs]):
        assert run.status == RunStatus.FAILED
        assert "reached the run's limit of 3" in run.failure_reason
    per_minute = cluster.create_calls / minutes
    print(f"threshold={threshold} creates={cluster.create_calls} minutes={minutes:.1f}")
    assert per_minute < 60


def _hooks_delivery(run: IngestRun) -> Job:
    return Job.objects.filter(pipeline_id=run.pipeline, type="ingest.RunHooks").latest("pk")


@override_settings(INGEST_QUEUE_WAIT_SECONDS=10)
def test_runs_cancelled_while_their_jobs_wait_for_room_hold_no_tenants_launches(clock, cluster):
    """The launch window counts only the hooks of running runs: once cancelled runs are
    settled, a held run of the same tenant launches at its next delivery."""
    acme, globex = tenant("Acme"), tenant("Globex")
    cluster.capacity = 0
    target = runners.current().target
    RunnerBreaker.objects.create(target=target, tenant=acme, window=3)  # pressure narrowed it
    cancelled = [services.start_ingest(builders.source(acme, f"feed{n}", batches=1)) for n in range(3)]
    jobs.run_until_idle()
    assert len(cluster.jobs()) == 3
    later = services.start_ingest(builders.source(acme, "later", batches=1))
    other = services.start_ingest(builders.source(globex, "other", batches=1))
    jobs.run_until_idle()

    assert len(cluster.jobs()) == 4  # Globex's own window took its hook
    held = JobEvent.objects.filter(job=_hooks_delivery(later), kind="snoozed").latest("pk")
    assert held.message == (
        f"this tenant's launch window on {target} is full: 3 of its hooks "
        "launched there wait for room (window 3); asking again in 10s"
    )

    for run in cancelled:
        services.cancel_run(run, via="api")
    jobs.run_until_idle()  # the cancelled runs' Jobs are removed
    settled = HookExecution.objects.filter(batch__run__in=cancelled)
    assert {(e.status, e.reason, e.finished_at) for e in settled} == {
        (ExecutionStatus.CANCELLED, f"ended with run {e.batch.run_id} (cancelled)", clock.now())
        for e in settled
    }
    assert breaker.admit(target, acme.pk, 0, clock.now()).allowed  # they count no more

    cluster.capacity = None
    creates = cluster.create_calls
    clock.advance(10.001)
    jobs.run_until_idle()  # the held delivery's next attempt
    assert cluster.create_calls == creates + 1
    execution = HookExecution.objects.get(batch__run=later)
    assert cluster.job(execution.runner_ref) is not None
    drain(clock)
    assert {run.status for run in IngestRun.objects.filter(pk__in=[later.pk, other.pk])} == {
        RunStatus.SUCCEEDED
    }


@override_settings(INGEST_HOOK_POLL_SECONDS=10)
def test_a_failed_run_leaves_no_job_and_its_retry_launches_new_jobs_with_the_fixed_image(clock, cluster):
    broken, fixed = "registry.example/hooks:broken", "registry.example/hooks:2"
    cluster.behaviours[broken] = Behaviour(pull_error=True)
    cluster.capacity = 1  # batch 1's Pod has a node, the others wait for room
    entry = builders.entry(["check"], "checker", image=broken)
    run = services.start_ingest(builders.source(tenant("Acme"), batches=3, hooks=[entry], max_failures=1))
    jobs.run_until_idle()
    assert len(cluster.jobs()) == 3
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "ErrImagePull" in run.failure_reason
    assert (cluster.jobs(), cluster.pods()) == ([], [])
    first = {e.pk: e.runner_ref for e in HookExecution.objects.filter(batch__run=run)}
    assert set(HookExecution.objects.filter(batch__run=run).values_list("status", flat=True)) == {
        ExecutionStatus.FAILED,
        ExecutionStatus.CANCELLED,
    }

    HookTemplate.objects.filter(pk=entry.pk).update(image=fixed)
    services.retry_failed_hooks(run, via="admin")
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.failure_reason
    for execution in HookExecution.objects.filter(batch__run=run):
        assert execution.runner_ref == f"conveyor-hook-{execution.pk}-{execution.tries}"
        assert execution.runner_ref != first[execution.pk]
    received = cluster.received_jobs
    names = [job["metadata"]["name"] for job in received]
    assert len(names) == len(set(names)), "a Job name was created twice"
    retried = [job for job in received if job["metadata"]["name"] not in first.values()]
    assert {job["spec"]["template"]["spec"]["containers"][0]["image"] for job in retried} == {fixed}
    assert len(retried) == 3


def _cancel(run: IngestRun, clock) -> None:
    services.cancel_run(run, via="api")


def _fail_by_hooks(run: IngestRun, clock) -> None:
    drain(clock)  # batch 1's hook exits 3; the run allows one failure


def _fail_stalled(run: IngestRun, clock) -> None:
    for delivery in services.outstanding_jobs(run):  # its deliveries died, say
        jobs.cancel(delivery, reason="lost")
    clock.advance(services.STALL_GRACE_SECONDS + 1)
    assert services.fail_stalled_runs() == [run.pk]


@override_settings(INGEST_HOOK_POLL_SECONDS=10)
@pytest.mark.parametrize(
    "end",
    [_cancel, _fail_by_hooks, _fail_stalled],
    ids=["cancelled", "failed by its hooks", "failed stalled"],
)
def test_however_a_run_ends_its_executions_end_with_it_and_its_jobs_are_removed(clock, cluster, end):
    cluster.capacity = 1  # batch 1's hook runs, the others wait for room
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=5, exit_code=3)
    run = services.start_ingest(builders.source(tenant("Acme"), batches=3, hooks=[["check"]], max_failures=1))
    jobs.run_until_idle()
    assert HookExecution.objects.filter(batch__run=run, status=ExecutionStatus.RUNNING).count() == 3

    end(run, clock)
    drain(clock)

    run.refresh_from_db()
    assert run.finished
    executions = HookExecution.objects.filter(batch__run=run)
    assert not executions.filter(status__in=LIVE_EXECUTIONS).exists()
    assert not executions.filter(finished_at=None).exists()
    cancelled = executions.filter(status=ExecutionStatus.CANCELLED)
    assert {e.reason for e in cancelled} == {f"ended with run {run.pk} ({run.status})"}
    assert Job.objects.get(pipeline_id=run.pipeline, type="ingest.StopHooks").state == "succeeded"
    assert (cluster.jobs(), cluster.pods()) == ([], [])


def test_small_runs_of_other_tenants_are_not_queued_behind_a_big_runs_pending_hooks(clock, cluster):
    """Room for one hook: a 12-batch run fills its launch window with Pods waiting for a
    node, which the scheduler gives out first come. Two tenants' 1-batch runs started
    just after it get their share: the big run's launches beyond its share are taken
    back, so the small runs' hooks wait behind a few of its hooks, not all it queued."""
    cluster.capacity = 1
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=5, create_seconds=1)
    big = services.start_ingest(builders.source(tenant("Acme"), "big", batches=12, hooks=[["check"]]))
    jobs.run_until_idle()
    assert cluster.create_calls == 8  # its whole window, the cluster's queue
    clock.advance(1)
    small = [
        services.start_ingest(builders.source(tenant(name), "small", batches=1, hooks=[["check"]]))
        for name in ("Globex", "Initech")
    ]
    drain(clock)
    runs = IngestRun.objects.filter(pk__in=[big.pk, *(r.pk for r in small)])
    assert {run.status for run in runs} == {RunStatus.SUCCEEDED}
    published = list(
        IngestRun.objects.filter(batches__status=BatchStatus.PUBLISHED)
        .order_by("batches__published_at")
        .values_list("pk", flat=True)
    )
    for run in small:
        assert published.index(run.pk) < 6, published  # not behind all of acme's 8
    # Taken back: the Jobs deleted that are not their hook's last try (each run's end
    # removes those).
    last = set(HookExecution.objects.values_list("runner_ref", flat=True))
    withdrawn = [
        call for call in cluster.calls if call.method == "DELETE" and call.path.rsplit("/", 1)[-1] not in last
    ]
    assert withdrawn and all("conveyor-hook-" in call.path for call in withdrawn)
    tries = HookExecution.objects.filter(batch__run=big).values_list("tries", flat=True)
    assert sum(tries) == 12 + len(withdrawn)  # each taken back once launched again
    assert not RunnerBreaker.objects.filter(failures__gt=0).exists()


def test_a_long_hook_is_looked_at_less_often_as_it_runs(clock, cluster):
    """A 30 s hook: one request per look while it runs (its Pods), looks 2 s apart at
    first and a tenth of its age apart later, and its end noticed within 3 s."""
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=30, create_seconds=1)
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]]))
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    execution = HookExecution.objects.get(batch__run=run)
    assert (execution.finished_at - execution.launched_at).total_seconds() <= 31 + 3
    calls = [(call.method, call.path.rsplit("/", 1)[-1]) for call in cluster.calls]
    # The run's end removes its Job: a list of the run's Jobs and a delete.
    assert calls[-2:] == [("GET", "jobs"), ("DELETE", execution.runner_ref)], calls
    # A create, 15 looks at its Pods, the Job read and the log once it has ended: 18
    # requests where a look every 2 s at the Job and its Pods made 34.
    assert len(calls[:-2]) <= 18, calls
    assert calls.count(("GET", execution.runner_ref)) == 1


@override_settings(INGEST_BREAKER_THRESHOLD=2, INGEST_BREAKER_COOLDOWN_SECONDS=60, INGEST_HOOK_POLL_SECONDS=2)
def test_hooks_held_by_the_breaker_resume_as_soon_as_its_probe_gets_room(clock, cluster):
    """The probe's success closes the breaker and wakes the deliveries it held, instead of
    leaving them to sleep out a cool-down."""
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=5)
    cluster.refuse_creates(
        403,
        'jobs.batch "x" is forbidden: exceeded quota: hooks, '
        "requested: count/jobs.batch=1, used: count/jobs.batch=9, "
        "limited: count/jobs.batch=9",
    )
    run = services.start_ingest(
        builders.source(tenant("Acme"), batches=6, hooks=[["check"]], max_failures=100)
    )
    jobs.run_until_idle()
    row = RunnerBreaker.objects.get(tenant__slug="acme")
    assert row.state == BreakerState.OPEN  # two refusals opened it
    cluster.refuse_creates(None)  # room again, which only the probe can find out

    seen: dict[str, object] = {}

    def watch() -> None:
        if "closed" not in seen and RunnerBreaker.objects.get(pk=row.pk).state == "closed":
            seen["closed"] = clock.now()
        made = [call for call in cluster.calls if call.method == "POST" and call.status == 201]
        if "next" not in seen and len(made) >= 2:  # the first Job after the probe's
            seen["next"] = clock.now()

    drain(clock, each=watch)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.failure_reason
    # The deliveries it held were woken when the probe closed it, and the next Job was
    # created within a poll of that, not a cool-down (60 s) later; the launch window,
    # narrowed by the refusals, paces the rest.
    woken = JobEvent.objects.filter(job__pipeline_id=run.pipeline, kind="woken")
    assert woken.count() >= 4
    assert {event.at for event in woken} == {seen["closed"]}
    assert seen["next"] - seen["closed"] < timedelta(seconds=3), seen


def test_a_look_the_api_does_not_answer_keeps_the_try_instead_of_launching_a_second(clock, cluster):
    """A 503 while a hook runs says nothing about the hook: its Job is looked at again,
    and no second Job runs beside it."""
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=20)
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]]))
    jobs.run_until_idle()
    clock.advance(3)
    cluster.fail_next("GET", cluster.pods_path, 503, times=2)
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.failure_reason
    execution = HookExecution.objects.get(batch__run=run)
    assert (execution.tries, cluster.create_calls) == (1, 1)


def test_a_create_answered_with_a_5xx_is_removed_before_the_next_try(clock, cluster):
    """The Job of a create the API answered with a 5xx may exist: it is deleted before a
    new try is launched under a new name."""
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=5)
    cluster.fail_next("POST", cluster.jobs_path, 503)
    run = services.start_ingest(builders.source(tenant("Acme"), batches=1, hooks=[["check"]]))
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.failure_reason
    execution = HookExecution.objects.get(batch__run=run)
    first = f"conveyor-hook-{execution.pk}-1"
    calls = [
        (call.method, call.path.rsplit("/", 1)[-1])
        for call in cluster.calls
        if call.method in ("POST", "DELETE")
    ]
    assert calls[:3] == [("POST", "jobs"), ("DELETE", first), ("POST", "jobs")], calls
    assert execution.tries == 2
