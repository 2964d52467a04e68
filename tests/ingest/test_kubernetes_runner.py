"""The Kubernetes hook runner against a fake API server (devtools/fakes/kubernetes.py) through the
official client and a kubeconfig file, as against a cluster. The fake and ``poll`` share
one manual clock: a test moves it instead of sleeping."""

from __future__ import annotations

import json

import kubernetes
import pytest

from devtools.fakes.kubernetes import Behaviour, FakeCluster
from ingest.runs.errors import PermanentRunnerError, TransientResourceError
from ingest.runs.runners.base import HookSpec, Phase, Resources
from ingest.runs.runners.kubernetes import KubernetesRunner
from jobs.redaction import REDACTED
from jobs.testing import T0
from tests.support import pod_security

IMAGE = "registry.example/hooks/enrich:1.4"
QUOTA = (
    'jobs.batch "conveyor-hook-1-1" is forbidden: exceeded quota: hooks, requested: '
    "count/jobs.batch=1, used: count/jobs.batch=20, limited: count/jobs.batch=20"
)
POD_SECURITY = (
    'pods "conveyor-hook-1-1" is forbidden: violates PodSecurity "restricted:latest": '
    'allowPrivilegeEscalation != false (container "hook" must set '
    "securityContext.allowPrivilegeEscalation=false)"
)
IMAGE_POLICY = (
    'admission webhook "images.policy.example" denied the request: image '
    '"registry.example/hooks/enrich:1.4" is not from an allowed registry'
)
BAD_RESOURCES = (
    'Job.batch "conveyor-hook-1-1" is invalid: spec.template.spec.containers[0]'
    '.resources.requests: Invalid value: "4Gi": must be less than or equal to '
    "memory limit of 512Mi"
)
LOG = "".join(f"record {n} enriched\n" for n in range(1, 301)) + "done: 300 records\n"


def hook(
    name: str = "conveyor-hook-1-1",
    *,
    image: str = IMAGE,
    timeout: int = 600,
    labels: dict[str, str] | None = None,
) -> HookSpec:
    return HookSpec(
        name=name,
        image=image,
        command=("enrich", "--strict"),
        env={"INGEST_RUN": "7", "MODE": "fast"},
        resources=Resources(cpu_request="250m", memory_request="256Mi", memory_limit="512Mi"),
        timeout_seconds=timeout,
        batch_location="s3://conveyor-batches/7/1.jsonl",
        labels=labels
        or {
            "conveyor.io/run": "7",
            "conveyor.io/batch": "1",
            "conveyor.io/tenant": "acme",
            "conveyor.io/hook": "enrich",
        },
    )


@pytest.fixture
def cluster(clock):
    with FakeCluster(clock=clock.now) as fake:
        yield fake
    assert fake.errors == []  # the fake itself never failed


def make_runner(cluster: FakeCluster, path, *, token: str | None = None, **options) -> KubernetesRunner:
    kubeconfig = cluster.kubeconfig(path / "kubeconfig", token=token)
    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    settings = {
        "namespace": cluster.namespace,
        "schedule_timeout_seconds": 120,
        "ttl_seconds_after_finished": 600,
        "request_timeout_seconds": 5,
        "log_tail_chars": 200,
        **options,
    }
    return KubernetesRunner(api_client, **settings)


@pytest.fixture
def runner(cluster, tmp_path):
    runner = make_runner(cluster, tmp_path)
    yield runner
    runner.api_client.close()


def poll(runner: KubernetesRunner, spec: HookSpec, clock):
    return runner.poll(spec, T0, clock.now())


# -- launching ------------------------------------------------------------------


def test_the_job_is_launched_as_the_cluster_receives_it(cluster, runner):
    status = runner.launch(hook())

    assert status.phase == Phase.PENDING
    assert runner.target == f"kubernetes:{cluster.url.removeprefix('http://')}/conveyor-hooks"
    [job] = cluster.received_jobs
    labels = {
        "conveyor.io/run": "7",
        "conveyor.io/batch": "1",
        "conveyor.io/tenant": "acme",
        "conveyor.io/hook": "enrich",
        "app.kubernetes.io/managed-by": "conveyor",
    }
    assert job["metadata"] == {"name": "conveyor-hook-1-1", "labels": labels}
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (
        0,
        600,
        600,
    )
    assert spec["template"]["metadata"]["labels"] == labels
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "fsGroup": 65534,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]
    [container] = pod["containers"]
    assert container == {
        "name": "hook",
        "image": IMAGE,
        "command": ["enrich", "--strict"],
        "env": [
            {"name": "INGEST_RUN", "value": "7"},
            {"name": "MODE", "value": "fast"},
            {"name": "HOME", "value": "/tmp"},
            {"name": "TMPDIR", "value": "/tmp"},
            {"name": "INGEST_BATCH_URL", "value": "s3://conveyor-batches/7/1.jsonl"},
        ],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
    }
    [pod] = cluster.pods("conveyor-hook-1-1")
    assert pod["metadata"]["labels"]["job-name"] == "conveyor-hook-1-1"
    assert pod["metadata"]["labels"]["conveyor.io/run"] == "7"


def test_the_hook_pod_meets_the_restricted_pod_security_standard(cluster, runner):
    runner.launch(hook())
    pod = cluster.received_jobs[0]["spec"]["template"]["spec"]
    assert pod_security.violations(pod) == []
    # A read-only root still has somewhere to write: the size-bounded emptyDir at /tmp.
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [{"name": "scratch", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["emptyDir"]["sizeLimit"] == "1Gi"


@pytest.mark.parametrize(
    "change, rule",
    [
        (
            lambda pod: pod["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
            "allowPrivilegeEscalation",
        ),
        (lambda pod: pod["securityContext"].update(runAsUser=0), "runAsUser is 0"),
        (lambda pod: pod.update(hostNetwork=True), "hostNetwork"),
        (lambda pod: pod["securityContext"].pop("seccompProfile"), "seccompProfile"),
        (lambda pod: pod["containers"][0]["securityContext"]["capabilities"].update(drop=[]), "drop ALL"),
        (lambda pod: pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "hostPath"),
        (lambda pod: pod["containers"][0]["securityContext"].update(privileged=True), "privileged"),
    ],
)
def test_the_pod_security_rules_refuse_what_the_standard_refuses(cluster, runner, change, rule):
    runner.launch(hook())
    pod = cluster.received_jobs[0]["spec"]["template"]["spec"]
    change(pod)
    assert any(rule in violation for violation in pod_security.violations(pod))


def test_the_pod_runs_as_the_configured_user_with_the_configured_scratch(cluster, tmp_path):
    runner = make_runner(cluster, tmp_path, run_as_user=20001, scratch_limit="256Mi")
    runner.launch(hook())
    pod = cluster.received_jobs[0]["spec"]["template"]["spec"]
    context = pod["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (20001,) * 3
    assert pod["volumes"][0]["emptyDir"] == {"sizeLimit": "256Mi"}


def test_a_runner_never_runs_hooks_as_root(cluster, tmp_path):
    with pytest.raises(ValueError, match="non-root"):
        make_runner(cluster, tmp_path, run_as_user=0)


def test_the_hook_cannot_replace_its_home_or_batch_location(cluster, runner):
    spec = hook()
    runner.launch(
        HookSpec(
            name=spec.name,
            image=spec.image,
            command=spec.command,
            env={"HOME": "/", "INGEST_BATCH_URL": "s3://elsewhere"},
            batch_location=spec.batch_location,
        )
    )
    env = cluster.received_jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [
        {"name": "HOME", "value": "/tmp"},
        {"name": "TMPDIR", "value": "/tmp"},
        {"name": "INGEST_BATCH_URL", "value": spec.batch_location},
    ]


def test_a_service_account_is_named_on_the_pod(cluster, tmp_path):
    runner = make_runner(cluster, tmp_path, service_account="conveyor-hooks")
    runner.launch(hook())
    assert cluster.received_jobs[0]["spec"]["template"]["spec"]["serviceAccountName"] == "conveyor-hooks"


def test_launching_the_same_name_again_adopts_the_job(cluster, runner, clock):
    runner.launch(hook())
    clock.advance(2)

    status = runner.launch(hook())

    assert status.phase == Phase.RUNNING
    assert cluster.jobs() == ["conveyor-hook-1-1"]
    assert cluster.create_calls == 2
    assert [c.status for c in cluster.calls if c.method == "POST"] == [201, 409]
    assert len(cluster.pods()) == 1


def test_a_job_of_the_same_name_that_is_not_conveyors_is_not_adopted(cluster, runner):
    spec = hook()
    foreign = runner.manifest(spec)
    foreign.metadata.labels = {"team": "data"}
    kubernetes.client.BatchV1Api(runner.api_client).create_namespaced_job(cluster.namespace, foreign)

    with pytest.raises(PermanentRunnerError, match="not Conveyor's"):
        runner.launch(spec)


def test_a_job_the_api_finds_invalid_is_a_permanent_error(cluster, runner):
    with pytest.raises(PermanentRunnerError, match=r"422.*is invalid: metadata.name"):
        runner.launch(hook("Conveyor_Hook_1"))
    assert cluster.jobs() == []


# -- how a hook ends ----------------------------------------------------------------


def test_a_hook_that_exits_zero_succeeds_with_its_log_tail(cluster, runner, clock):
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=30, log=LOG)
    spec = hook()
    runner.launch(spec)
    assert poll(runner, spec, clock).phase == Phase.PENDING  # ContainerCreating
    clock.advance(5)
    assert poll(runner, spec, clock) == poll(runner, spec, clock)
    assert poll(runner, spec, clock).phase == Phase.RUNNING
    clock.advance(30)

    status = poll(runner, spec, clock)

    assert (status.phase, status.exit_code, status.pod_phase) == (Phase.SUCCEEDED, 0, "Succeeded")
    assert status.log_tail == LOG[-200:]
    [log] = [c for c in cluster.calls if c.path.endswith("/log")]
    assert (log.query["tailLines"], log.query["limitBytes"]) == ("200", "65537")


def test_secrets_in_a_hooks_log_are_taken_out_before_it_is_kept(cluster, runner, clock, settings):
    settings.EXPORTS_WORKER_TOKEN = "worker-token-0123456789"
    cluster.behaviours[IMAGE] = Behaviour(
        run_seconds=1,
        log=("token worker-token-0123456789\nreading https://hook:pw-5678@store.example/batch\n"),
    )
    spec = hook()
    runner.launch(spec)
    clock.advance(10)
    status = poll(runner, spec, clock)
    assert status.log_tail == (f"token {REDACTED}\nreading https://hook:{REDACTED}@store.example/batch\n")


def test_the_secrets_of_the_hooks_own_environment_are_taken_out_of_its_log(cluster, runner, clock):
    # The entry's fixed environment is the operators': tenants are not shown it, and
    # would read it in the log tail if the hook printed it.
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=1, log="using key entry-api-key-0123456789\n")
    spec = HookSpec(
        **{**hook().__dict__, "env": {"VENDOR_API_KEY": "entry-api-key-0123456789", "MODE": "strict"}}
    )
    runner.launch(spec)
    clock.advance(10)
    assert poll(runner, spec, clock).log_tail == f"using key {REDACTED}\n"


def test_a_log_tail_is_the_logs_end_even_when_its_last_lines_are_long(cluster, runner, clock):
    long_lines = "".join(f"{n:04d}" + "x" * 1995 + "\n" for n in range(100))  # 200 kB
    cluster.behaviours[IMAGE] = Behaviour(exit_code=1, log=long_lines)
    spec = hook()
    runner.launch(spec)
    clock.advance(10)

    status = poll(runner, spec, clock)

    assert status.log_tail == long_lines[-200:]
    # 200 lines did not fit in 64 KiB, 32 lines did: ask for half of those.
    assert [c.query["tailLines"] for c in cluster.calls if c.path.endswith("/log")] == ["200", "16"]


@pytest.mark.parametrize("exit_code, reason", [(3, ""), (137, "OOMKilled")])
def test_a_hook_that_exits_non_zero_fails_with_its_exit_code_and_log_tail(
    cluster, runner, clock, exit_code, reason
):
    cluster.behaviours[IMAGE] = Behaviour(
        exit_code=exit_code, reason=reason, log="reading batch\nbad record 17: no id\n"
    )
    spec = hook()
    runner.launch(spec)
    clock.advance(10)

    status = poll(runner, spec, clock)

    assert status.phase == Phase.FAILED
    assert status.exit_code == exit_code
    assert status.reason == (reason or "Error")
    assert status.pod_phase == "Failed"
    assert status.log_tail == "reading batch\nbad record 17: no id\n"


def test_a_poll_of_a_running_hook_is_one_request_and_its_end_reads_the_job(cluster, runner, clock):
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=30, log=LOG)
    spec = hook()
    runner.launch(spec)
    clock.advance(5)
    before = len(cluster.calls)
    assert poll(runner, spec, clock).phase == Phase.RUNNING
    [look] = cluster.calls[before:]
    assert (look.method, look.path, look.query["labelSelector"]) == (
        "GET",
        cluster.pods_path,
        f"job-name={spec.name}",
    )

    clock.advance(30)
    before = len(cluster.calls)
    assert poll(runner, spec, clock).phase == Phase.SUCCEEDED
    paths = [call.path for call in cluster.calls[before:]]
    assert paths[:2] == [cluster.pods_path, f"{cluster.jobs_path}/{spec.name}"]
    assert paths[2].endswith("/log") and len(paths) == 3


def test_a_pod_of_another_job_of_the_same_name_is_not_taken_for_the_hooks(cluster, runner, clock):
    """A Job deleted without its Pods leaves them behind, no longer owned: a Job created
    again under the name gets its own Pod, and only that one says how its hook does."""
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=3600)
    spec = hook()
    runner.launch(spec)
    clock.advance(5)
    runner._batch.delete_namespaced_job(spec.name, cluster.namespace, propagation_policy="Orphan")
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=3600, pull_error=True)
    runner.launch(spec)
    clock.advance(20)

    with pytest.raises(PermanentRunnerError, match="ImagePullBackOff"):
        poll(runner, spec, clock)


def test_a_hook_past_its_deadline_fails_with_deadline_exceeded(cluster, runner, clock):
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=3600, log="still going\n")
    spec = hook(timeout=30)
    runner.launch(spec)
    clock.advance(29)
    assert poll(runner, spec, clock).phase == Phase.RUNNING
    clock.advance(2)

    status = poll(runner, spec, clock)

    assert (status.phase, status.reason) == (Phase.FAILED, "DeadlineExceeded")
    assert status.log_tail == "still going\n"
    [pod] = cluster.pods()
    assert pod["status"]["phase"] == "Failed"  # killed, terminating
    assert "deletionTimestamp" in pod["metadata"]


# -- the cluster's trouble: transient ----------------------------------------------------


def test_an_unscheduled_pod_is_pending_within_the_schedule_timeout(clock, tmp_path):
    with FakeCluster(clock=clock.now, capacity=0) as cluster:
        runner = make_runner(cluster, tmp_path)
        spec = hook()
        runner.launch(spec)
        clock.advance(119)

        status = poll(runner, spec, clock)

        assert (status.phase, status.pod_phase) == (Phase.PENDING, "Pending")
        assert status.reason.startswith("Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.")
        assert cluster.jobs() == ["conveyor-hook-1-1"]


def test_an_unscheduled_pod_past_the_schedule_timeout_is_transient_and_its_job_deleted(clock, tmp_path):
    with FakeCluster(clock=clock.now, capacity=0) as cluster:
        runner = make_runner(cluster, tmp_path)
        spec = hook()
        runner.launch(spec)
        clock.advance(121)

        with pytest.raises(
            TransientResourceError, match="not scheduled 121s after its launch.*Insufficient cpu"
        ):
            poll(runner, spec, clock)

        assert cluster.jobs() == [] and cluster.pods() == []
        [delete] = [c for c in cluster.calls if c.method == "DELETE"]
        assert delete.query["propagationPolicy"] == "Background"


def test_a_third_pod_waits_for_capacity_and_is_scheduled_when_one_finishes(clock, tmp_path):
    with FakeCluster(clock=clock.now, capacity=2) as cluster:
        runner = make_runner(cluster, tmp_path)
        cluster.behaviours["hooks/slow:1"] = Behaviour(run_seconds=60)
        first, second, third = (hook(f"conveyor-hook-{n}-1") for n in (1, 2, 3))
        runner.launch(first)
        clock.advance(1)
        runner.launch(hook(second.name, image="hooks/slow:1"))
        clock.advance(1)
        runner.launch(third)
        assert "Insufficient cpu" in poll(runner, third, clock).reason
        clock.advance(5)  # the first finished 6 s after its launch, at T0 + 6 s

        status = poll(runner, third, clock)

        assert (status.phase, status.pod_phase) == (Phase.RUNNING, "Running")
        assert poll(runner, first, clock).phase == Phase.SUCCEEDED
        [pod] = cluster.pods(third.name)
        assert pod["status"]["startTime"] == "2026-11-02T09:00:06Z"


def test_an_evicted_pod_is_transient(cluster, runner, clock):
    cluster.behaviours[IMAGE] = Behaviour(run_seconds=60, evict_after=10)
    spec = hook()
    runner.launch(spec)
    clock.advance(20)

    with pytest.raises(
        TransientResourceError, match="evicted: Evicted: The node was low on resource: memory"
    ):
        poll(runner, spec, clock)
    assert cluster.jobs() == []


def test_a_job_that_vanished_is_transient(cluster, runner, clock):
    spec = hook()
    runner.launch(spec)
    cluster.vanish(spec.name)

    with pytest.raises(TransientResourceError, match=r"vanished.*404"):
        poll(runner, spec, clock)


def test_a_pod_deleted_behind_the_runners_back_is_transient(cluster, runner, clock):
    spec = hook()
    runner.launch(spec)
    [pod] = cluster.pods()
    kubernetes.client.CoreV1Api(runner.api_client).delete_namespaced_pod(
        pod["metadata"]["name"], cluster.namespace
    )

    with pytest.raises(TransientResourceError, match="vanished"):
        poll(runner, spec, clock)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_an_overloaded_api_is_transient_and_not_retried_by_the_client(cluster, runner, clock, status):
    spec = hook()
    runner.launch(spec)
    path = cluster.pods_path  # a poll's first (and while the hook runs, only) request
    cluster.fail_next("GET", path, status)

    with pytest.raises(TransientResourceError, match=f"answered {status}"):
        poll(runner, spec, clock)
    assert cluster.count("GET", path) == 1

    assert poll(runner, spec, clock).phase == Phase.PENDING  # the fault has passed


def test_a_throttled_create_is_transient_and_says_when_to_retry(cluster, runner):
    cluster.fail_next("POST", cluster.jobs_path, 429, retry_after=7)
    with pytest.raises(TransientResourceError, match=r"429.*retry after 7s"):
        runner.launch(hook())
    assert cluster.create_calls == 1


def test_a_full_quota_is_transient(cluster, runner):
    cluster.refuse_creates(403, QUOTA)
    with pytest.raises(TransientResourceError, match="exceeded quota"):
        runner.launch(hook())
    assert cluster.create_calls == 1 and cluster.jobs() == []


def test_an_unreachable_api_is_transient(cluster, runner, clock):
    spec = hook()
    runner.launch(spec)
    cluster.stop()

    with pytest.raises(TransientResourceError, match="unreachable"):
        poll(runner, spec, clock)


def test_an_api_that_does_not_answer_in_time_is_transient(cluster, tmp_path, clock):
    runner = make_runner(cluster, tmp_path, request_timeout_seconds=0.2)
    spec = hook()
    runner.launch(spec)
    cluster.stall_next("GET", cluster.pods_path, 1.0)

    with pytest.raises(TransientResourceError, match="unreachable.*(?i:timed out)"):
        poll(runner, spec, clock)


# -- the hook cannot run as configured: permanent ------------------------------------------


def test_a_forbidden_create_is_permanent(cluster, runner):
    cluster.refuse_creates(403)
    with pytest.raises(PermanentRunnerError, match='403.*cannot create resource "jobs"'):
        runner.launch(hook())


@pytest.mark.parametrize(
    "status, message", [(403, POD_SECURITY), (403, IMAGE_POLICY), (400, IMAGE_POLICY), (422, BAD_RESOURCES)]
)
def test_a_policy_or_an_invalid_spec_refusing_the_job_is_permanent(cluster, runner, status, message):
    cluster.refuse_creates(status, message)
    with pytest.raises(PermanentRunnerError, match=f"{status}.*"):
        runner.launch(hook())
    assert cluster.create_calls == 1 and cluster.jobs() == []


@pytest.mark.parametrize(
    "message",
    [
        POD_SECURITY,
        IMAGE_POLICY,
        (
            'pods "conveyor-hook-1-1-x2b4q" is forbidden: [maximum memory usage per Container is '
            "1Gi, but limit is 2Gi]"
        ),
    ],
)
def test_a_pod_the_cluster_refuses_to_create_is_permanent_and_its_job_removed(
    cluster, runner, clock, message
):
    cluster.refuse_pods(message)
    spec = hook()
    assert runner.launch(spec).phase == Phase.PENDING  # the Job is admitted; its Pod is not
    clock.advance(2)
    with pytest.raises(PermanentRunnerError, match="the cluster refuses its Pod: Error creating: "):
        poll(runner, spec, clock)
    assert cluster.jobs() == [] and cluster.pods() == []
    [event] = cluster.events()
    assert event["involvedObject"]["name"] == spec.name


def test_a_pod_refused_for_a_full_quota_waits_and_is_pressure_at_the_schedule_timeout(cluster, runner, clock):
    cluster.refuse_pods(
        'pods "conveyor-hook-1-1-x2b4q" is forbidden: exceeded quota: hooks, '
        "requested: pods=1, used: pods=20, limited: pods=20"
    )
    spec = hook()
    runner.launch(spec)
    clock.advance(2)
    status = poll(runner, spec, clock)
    assert status.phase == Phase.PENDING and "exceeded quota" in status.reason
    clock.advance(200)
    with pytest.raises(TransientResourceError, match="not scheduled.*exceeded quota"):
        poll(runner, spec, clock)


def test_a_runner_that_may_not_read_events_waits_as_before(cluster, runner, clock):
    cluster.refuse_pods(POD_SECURITY)
    spec = hook()
    runner.launch(spec)
    cluster.fail_next("GET", f"/api/v1/namespaces/{cluster.namespace}/events", 403, times=1)
    assert poll(runner, spec, clock).phase == Phase.PENDING


def test_an_unauthorized_client_is_permanent(cluster, tmp_path):
    runner = make_runner(cluster, tmp_path, token="expired")
    with pytest.raises(PermanentRunnerError, match="401"):
        runner.launch(hook())
    assert cluster.create_calls == 1 and cluster.jobs() == []


@pytest.mark.parametrize(
    "behaviour, seconds, reason",
    [
        (Behaviour(pull_error=True), 2, "ErrImagePull"),
        (Behaviour(pull_error=True), 15, "ImagePullBackOff"),
        (Behaviour(invalid_image=True), 0, "InvalidImageName"),
        (Behaviour(config_error='secret "hook-credentials" not found'), 2, "CreateContainerConfigError"),
    ],
)
def test_a_container_that_cannot_start_is_permanent_and_its_job_deleted(
    cluster, runner, clock, behaviour, seconds, reason
):
    cluster.behaviours[IMAGE] = behaviour
    spec = hook()
    runner.launch(spec)
    clock.advance(seconds)

    with pytest.raises(PermanentRunnerError, match=f"cannot start: {reason}: "):
        poll(runner, spec, clock)
    assert cluster.jobs() == [] and cluster.pods() == []


# -- stopping -----------------------------------------------------------------------


def test_stop_labelled_deletes_only_the_matching_jobs_and_their_pods(cluster, runner):
    for name, run in (("conveyor-hook-1-1", "7"), ("conveyor-hook-2-1", "7"), ("conveyor-hook-3-1", "8")):
        runner.launch(hook(name, labels={"conveyor.io/run": run}))

    assert runner.stop_labelled({"conveyor.io/run": "7"}) == 2

    assert cluster.jobs() == ["conveyor-hook-3-1"]
    assert [p["metadata"]["labels"]["job-name"] for p in cluster.pods()] == ["conveyor-hook-3-1"]
    assert runner.stop_labelled({"conveyor.io/run": "7"}) == 0
    runner.stop("conveyor-hook-1-1")  # gone already: nothing to do
    with pytest.raises(ValueError):
        runner.stop_labelled({})


# -- the settings and the fake itself ------------------------------------------------------


def test_the_runner_is_built_from_the_settings(cluster, tmp_path, settings):
    settings.INGEST_KUBECONFIG = str(cluster.kubeconfig(tmp_path / "kubeconfig", context="ci"))
    settings.INGEST_KUBE_CONTEXT = "ci"
    settings.INGEST_KUBE_SCHEDULE_TIMEOUT_SECONDS = 30

    runner = KubernetesRunner.from_settings()

    assert runner.target == f"kubernetes:{cluster.url.removeprefix('http://')}/conveyor-hooks"
    assert runner.schedule_timeout == 30.0
    assert runner.launch(hook()).phase == Phase.PENDING


def test_a_finished_job_is_removed_after_its_ttl(cluster, runner, clock):
    spec = hook()
    runner.launch(spec)
    clock.advance(10)
    assert cluster.job(spec.name)["status"]["conditions"][-1]["type"] == "Complete"
    clock.advance(600 - 5)  # finished at T0 + 6 s
    assert cluster.jobs() == [spec.name]
    clock.advance(1)
    assert cluster.jobs() == [] and cluster.pods() == []


def test_a_job_deleted_without_a_propagation_policy_orphans_its_pod(cluster, runner):
    runner.launch(hook())
    batch = kubernetes.client.BatchV1Api(runner.api_client)
    batch.delete_namespaced_job("conveyor-hook-1-1", cluster.namespace)
    [pod] = cluster.pods()
    assert "ownerReferences" not in pod["metadata"]


def test_the_fake_deletes_a_collection_by_label_and_answers_with_status_bodies(cluster, runner):
    for name, run in (("conveyor-hook-1-1", "7"), ("conveyor-hook-2-1", "8")):
        runner.launch(hook(name, labels={"conveyor.io/run": run}))
    batch = kubernetes.client.BatchV1Api(runner.api_client)
    core = kubernetes.client.CoreV1Api(runner.api_client)

    batch.delete_collection_namespaced_job(
        cluster.namespace, label_selector="conveyor.io/run=7", propagation_policy="Background"
    )

    assert cluster.jobs() == ["conveyor-hook-2-1"]
    with pytest.raises(kubernetes.client.ApiException) as missing:
        core.read_namespaced_pod("nope", cluster.namespace)
    assert json.loads(missing.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    with pytest.raises(PermanentRunnerError) as invalid:
        runner.launch(hook("x" * 64))
    body = json.loads(invalid.value.__cause__.body)
    assert (body["code"], body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"


def test_the_fake_streams_watch_events(cluster, runner, clock):
    batch = kubernetes.client.BatchV1Api(runner.api_client)
    runner.launch(hook())
    listed = batch.list_namespaced_job(cluster.namespace)
    clock.advance(10)  # the hook runs and completes before the watch looks

    seen = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        batch.list_namespaced_job,
        cluster.namespace,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
        _request_timeout=10,
    ):
        job = event["object"]
        conditions = [c.type for c in (job.status.conditions or ())]
        seen.append((event["type"], job.metadata.name, conditions))
        if "Complete" in conditions:
            watch.stop()
    assert seen[-1] == ("MODIFIED", "conveyor-hook-1-1", ["SuccessCriteriaMet", "Complete"])

    events = list(
        kubernetes.watch.Watch().stream(
            kubernetes.client.CoreV1Api(runner.api_client).list_namespaced_pod,
            cluster.namespace,
            label_selector="job-name=conveyor-hook-1-1",
            timeout_seconds=1,
            _request_timeout=10,
        )
    )
    assert [(e["type"], e["object"].status.phase) for e in events] == [("ADDED", "Succeeded")]
