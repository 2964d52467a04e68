"""Hooks as Kubernetes batch/v1 Jobs, one per hook execution and try, named after it so
that launching the name again adopts the Job a dead worker left behind.

The Job carries what the cluster must enforce on its own: no retries inside Kubernetes
(``backoffLimit: 0``; tries are the pipeline's decision), the hook's deadline
(``activeDeadlineSeconds``) and how long a finished Job stays for inspection
(``ttlSecondsAfterFinished``), and the sandbox: the Pod gets no API token and no
service links, runs as a non-root user with the runtime's seccomp profile, no privilege
escalation, no capabilities and a read-only root filesystem with a size-bounded
``emptyDir`` at ``/tmp`` for scratch; it meets the ``restricted`` Pod Security Standard,
which the hooks' namespace enforces, and that namespace's NetworkPolicies (``deploy/``)
keep it off the cluster's private addresses. What the API and the Pod say is sorted into the runner
contract: the hook's own outcome is a ``HookStatus``; the cluster's trouble is a
``TransientResourceError`` (busy, evicting, unreachable: retry later) or a
``PermanentRunnerError`` (the Job can never run as configured).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

import jobs
from ingest import conf
from ingest.runs.errors import InfrastructureError, PermanentRunnerError, TransientResourceError
from ingest.runs.runners.base import HookSpec, HookStatus, Phase, Resources

logger = logging.getLogger(__name__)

T = TypeVar("T")

CONTAINER = "hook"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "conveyor"
# A container waiting for one of these will wait for ever: its image or configuration is
# wrong, and trying again elsewhere cannot help.
HOPELESS_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
# The emptyDir volume mounted at /tmp, the only place a hook may write.
SCRATCH = "scratch"
SCRATCH_PATH = "/tmp"
# Log bytes read at most: per character kept (UTF-8 takes up to four), and at least.
BYTES_PER_CHAR = 4
LOG_READ_BYTES = 64 * 1024


class KubernetesRunner:
    """Runs each hook as a Job in one namespace of one cluster (see the module docstring)."""

    blocks = False  # a launch creates the Job; poll follows it

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        schedule_timeout_seconds: float = 120.0,
        ttl_seconds_after_finished: int = 3600,
        request_timeout_seconds: float = 10.0,
        log_tail_chars: int = 4000,
        service_account: str = "",
        run_as_user: int = 65534,
        scratch_limit: str = "1Gi",
    ) -> None:
        if int(run_as_user) <= 0:
            raise ValueError(f"hooks run as a non-root user, not {run_as_user}")
        _without_client_retries(api_client)
        self.api_client = api_client
        self.namespace = namespace
        self.schedule_timeout = float(schedule_timeout_seconds)
        self.ttl_seconds_after_finished = int(ttl_seconds_after_finished)
        self.request_timeout = float(request_timeout_seconds)
        self.log_tail_chars = int(log_tail_chars)
        # Only ever a hook account: a Pod can name an account of its own namespace alone,
        # and the hooks' namespace is never Conveyor's (system check ingest.E101).
        self.service_account = service_account
        self.run_as_user = int(run_as_user)
        self.scratch_limit = scratch_limit
        self._batch = client.BatchV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        host = api_client.configuration.host
        self.target = f"kubernetes:{urlsplit(host).netloc or host}/{namespace}"

    @classmethod
    def from_settings(cls) -> KubernetesRunner:
        """The cluster of ``INGEST_KUBECONFIG`` (and ``INGEST_KUBE_CONTEXT``), else the one
        this process runs in (its service account)."""
        kubeconfig = conf.get("KUBECONFIG")
        if kubeconfig:
            api_client = config.new_client_from_config(
                config_file=str(kubeconfig), context=conf.get("KUBE_CONTEXT") or None, persist_config=False
            )
        else:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            api_client = client.ApiClient(configuration)
        return cls(
            api_client,
            namespace=conf.get("KUBE_NAMESPACE"),
            schedule_timeout_seconds=conf.get("KUBE_SCHEDULE_TIMEOUT_SECONDS"),
            ttl_seconds_after_finished=conf.get("KUBE_TTL_SECONDS_AFTER_FINISHED"),
            request_timeout_seconds=conf.get("KUBE_REQUEST_TIMEOUT_SECONDS"),
            log_tail_chars=conf.get("HOOK_LOG_TAIL_CHARS"),
            service_account=conf.get("KUBE_SERVICE_ACCOUNT"),
            run_as_user=conf.get("KUBE_RUN_AS_USER"),
            scratch_limit=conf.get("KUBE_SCRATCH_LIMIT"),
        )

    # -- the contract -------------------------------------------------------------

    def launch(self, spec: HookSpec) -> HookStatus:
        try:
            self._call(
                f"creating Job {spec.name}",
                self._batch.create_namespaced_job,
                self.namespace,
                self.manifest(spec),
                passthrough=(409,),
                creating=True,
            )
        except ApiException:  # 409: a worker created it and died before recording that
            return self._adopt(spec)
        return HookStatus(Phase.PENDING, reason="Job created")

    def poll(self, spec: HookSpec, launched_at: datetime, now: datetime) -> HookStatus:
        """One request while the hook's Pod runs or waits: its Pods. A Job ends only once
        its Pod has ended or is being deleted (its deadline, a deletion), so the Job is
        read only then, or when there is no Pod to look at."""
        pods = self._pods_of(spec.name)
        live = [pod for pod in pods if _controlled_by(pod, spec.name)]
        pod = max(live, key=lambda pod: pod.metadata.creation_timestamp, default=None)
        if pod is not None and not _settling(pod):
            return self._status(spec, None, pod, launched_at, now)
        job = self._read_job(spec.name)
        return self._status(spec, job, _newest_of(job, pods), launched_at, now)

    def stop(self, name: str) -> None:
        """Delete the Job and, in the background, its Pod; a Job already gone is fine."""
        with contextlib.suppress(ApiException):  # 404 only: passed through below
            self._call(
                f"deleting Job {name}",
                self._batch.delete_namespaced_job,
                name,
                self.namespace,
                propagation_policy="Background",
                passthrough=(404,),
            )

    def stop_labelled(self, labels: Mapping[str, str]) -> int:
        if not labels:
            raise ValueError("stop_labelled needs labels: it never deletes every hook")
        selector = ",".join(
            f"{key}={value}" for key, value in sorted({**labels, MANAGED_BY: MANAGER}.items())
        )
        jobs = self._call(
            f"listing Jobs {selector}",
            self._batch.list_namespaced_job,
            self.namespace,
            label_selector=selector,
        )
        stopped = 0
        for job in jobs.items:
            try:
                self._call(
                    f"deleting Job {job.metadata.name}",
                    self._batch.delete_namespaced_job,
                    job.metadata.name,
                    self.namespace,
                    propagation_policy="Background",
                    passthrough=(404,),
                )
            except ApiException:
                continue  # gone meanwhile (its TTL, another worker): not ours to count
            stopped += 1
        return stopped

    # -- the Job ------------------------------------------------------------------

    def manifest(self, spec: HookSpec) -> client.V1Job:
        """The Job for ``spec``: one sandboxed Pod, never restarted, no Kubernetes-side
        retries."""
        labels = {**spec.labels, MANAGED_BY: MANAGER}
        fixed = {"HOME": SCRATCH_PATH, "TMPDIR": SCRATCH_PATH, "INGEST_BATCH_URL": spec.batch_location}
        env = [client.V1EnvVar(name=key, value=value) for key, value in spec.env.items() if key not in fixed]
        env.extend(client.V1EnvVar(name=key, value=value) for key, value in fixed.items())
        container = client.V1Container(
            name=CONTAINER,
            image=spec.image,
            command=list(spec.command) or None,
            env=env,
            resources=_resources(spec.resources),
            security_context=client.V1SecurityContext(
                allow_privilege_escalation=False,
                privileged=False,
                read_only_root_filesystem=True,
                run_as_non_root=True,
                capabilities=client.V1Capabilities(drop=["ALL"]),
            ),
            volume_mounts=[client.V1VolumeMount(name=SCRATCH, mount_path=SCRATCH_PATH)],
        )
        pod = client.V1PodSpec(
            containers=[container],
            restart_policy="Never",
            automount_service_account_token=False,
            enable_service_links=False,
            host_network=False,
            host_pid=False,
            host_ipc=False,
            service_account_name=self.service_account or None,
            security_context=client.V1PodSecurityContext(
                run_as_non_root=True,
                run_as_user=self.run_as_user,
                run_as_group=self.run_as_user,
                fs_group=self.run_as_user,
                seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
            ),
            volumes=[
                client.V1Volume(
                    name=SCRATCH,
                    empty_dir=client.V1EmptyDirVolumeSource(size_limit=self.scratch_limit or None),
                )
            ],
        )
        return client.V1Job(
            api_version="batch/v1",
            kind="Job",
            metadata=client.V1ObjectMeta(name=spec.name, labels=labels),
            spec=client.V1JobSpec(
                backoff_limit=0,
                active_deadline_seconds=spec.timeout_seconds,
                ttl_seconds_after_finished=self.ttl_seconds_after_finished,
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=dict(labels)), spec=pod
                ),
            ),
        )

    def _adopt(self, spec: HookSpec) -> HookStatus:
        job = self._read_job(spec.name)
        if (job.metadata.labels or {}).get(MANAGED_BY) != MANAGER:
            raise PermanentRunnerError(
                f"a Job named {spec.name} exists in {self.namespace} and is not Conveyor's"
            )
        if job.metadata.deletion_timestamp is not None:
            raise TransientResourceError(f"Job {spec.name} is still being deleted")
        created = job.metadata.creation_timestamp
        # Its age is measured from the launch the pipeline recorded, at the next poll.
        return self._status(spec, job, self._pod_of(job), created, created)

    def _read_job(self, name: str) -> client.V1Job:
        return self._call(f"reading Job {name}", self._batch.read_namespaced_job, name, self.namespace)

    def _pod_of(self, job: client.V1Job) -> client.V1Pod | None:
        """The Job's newest Pod (its controller's, by ownerReference), or None."""
        return _newest_of(job, self._pods_of(job.metadata.name))

    def _pods_of(self, name: str) -> list[client.V1Pod]:
        return self._call(
            f"listing the Pods of Job {name}",
            self._core.list_namespaced_pod,
            self.namespace,
            label_selector=f"job-name={name}",
        ).items

    def _status(
        self,
        spec: HookSpec,
        job: client.V1Job | None,
        pod: client.V1Pod | None,
        launched_at: datetime,
        now: datetime,
    ) -> HookStatus:
        """What ``job`` and its ``pod`` say; ``job`` None when only a Pod neither ended
        nor being deleted was looked at (its Job has not finished then)."""
        finished = _finished(job)
        if finished is not None and finished.type == "Complete":
            return self._outcome(spec, finished, pod)
        if pod is not None:
            eviction = _eviction(pod)
            if eviction:
                raise TransientResourceError(
                    f"the Pod of hook {spec.name} was evicted: {eviction}", try_ended=self._remove(spec.name)
                )
            waiting = _waiting(pod)
            if waiting is not None and waiting.reason in HOPELESS_WAITING:
                self._remove(spec.name)
                raise PermanentRunnerError(
                    f"hook {spec.name} cannot start: {waiting.reason}: {waiting.message or 'no message'}"
                )
        if finished is not None:
            return self._outcome(spec, finished, pod)
        phase = pod.status.phase if pod is not None and pod.status else ""
        refusal = self._pod_create_failure(job) if pod is None and job is not None else ""
        if refusal and _refused_for_good(refusal):
            # An admission policy (Pod Security, an image policy, a LimitRange) refuses
            # the Job's Pod: the spec's fault, which no wait or retry can mend.
            self._remove(spec.name)
            raise PermanentRunnerError(
                f"hook {spec.name} cannot start: the cluster refuses its Pod: {refusal}"
            )
        if pod is None or not _scheduled(pod):
            why = refusal or _unscheduled_reason(pod)
            waited = (now - launched_at).total_seconds()
            if waited > self.schedule_timeout:
                raise TransientResourceError(
                    f"hook {spec.name} not scheduled {waited:.0f}s after its launch "
                    f"(schedule timeout {self.schedule_timeout:.0f}s): {why}",
                    try_ended=self._remove(spec.name),
                )
            return HookStatus(Phase.PENDING, pod_phase=phase, reason=why)
        if phase == "Running":
            return HookStatus(Phase.RUNNING, pod_phase=phase, scheduled=True)
        waiting = _waiting(pod)
        return HookStatus(
            Phase.PENDING,
            pod_phase=phase,
            scheduled=True,
            reason=waiting.reason if waiting is not None else "",
        )

    def _pod_create_failure(self, job: client.V1Job) -> str:
        """Why the job controller could not create the Job's Pod, as its latest
        FailedCreate Event says, or "" (none, or Events cannot be read here)."""
        name = job.metadata.name
        selector = (
            f"involvedObject.kind=Job,involvedObject.name={name},"
            f"involvedObject.uid={job.metadata.uid},reason=FailedCreate"
        )
        try:
            events = self._call(
                f"listing the Events of Job {name}",
                self._core.list_namespaced_event,
                self.namespace,
                field_selector=selector,
            )
        except InfrastructureError as error:
            # Without them the Pod is waited for as before, up to the schedule timeout.
            logger.warning("cannot read the Events of Job %s: %s", name, error)
            return ""
        latest = max(
            events.items,
            default=None,
            key=lambda event: event.last_timestamp or event.event_time or event.metadata.creation_timestamp,
        )
        return (latest.message or "")[:1000] if latest is not None else ""

    def _outcome(self, spec: HookSpec, finished: Any, pod: client.V1Pod | None) -> HookStatus:
        """A finished Job's HookStatus: the hook's exit, or the deadline that stopped it."""
        terminated = _terminated(pod) if pod is not None else None
        phase = pod.status.phase if pod is not None and pod.status else ""
        exit_code = terminated.exit_code if terminated is not None else None
        log_tail = self._log_tail(pod.metadata.name, spec.env) if pod is not None else ""
        if finished.type == "Complete":
            return HookStatus(
                Phase.SUCCEEDED,
                pod_phase=phase,
                exit_code=0 if exit_code is None else exit_code,
                log_tail=log_tail,
            )
        if finished.reason == "DeadlineExceeded":
            return HookStatus(
                Phase.FAILED,
                pod_phase=phase,
                exit_code=exit_code,
                reason="DeadlineExceeded",
                log_tail=log_tail,
            )
        if terminated is None or terminated.started_at is None:
            # Failed without its container having run: the Pod was deleted or lost.
            raise TransientResourceError(
                f"the Pod of hook {spec.name} vanished: Job failed ({finished.reason}: "
                f"{finished.message}) without the hook having run",
                try_ended=self._remove(spec.name),
            )
        return HookStatus(
            Phase.FAILED,
            pod_phase=phase,
            exit_code=exit_code,
            reason=terminated.reason or finished.reason or "",
            log_tail=log_tail,
        )

    def _log_tail(self, pod_name: str, env: Mapping[str, str]) -> str:
        """The last ``log_tail_chars`` characters of the hook's log ("" if unavailable).

        The API cuts a log by lines from its end (tailLines), then by bytes from the start
        of those (limitBytes). Ask for as many lines as characters kept, within a byte
        bound; when they do not fit, ask again for fewer, guessed from the lines that did,
        so that what comes back is the log's end and never more than the bound.
        """
        if self.log_tail_chars <= 0:
            return ""
        limit = max(LOG_READ_BYTES, self.log_tail_chars * BYTES_PER_CHAR)
        lines = self.log_tail_chars
        while True:
            try:
                response = self._call(
                    f"reading the log of Pod {pod_name}",
                    self._core.read_namespaced_pod_log,
                    pod_name,
                    self.namespace,
                    container=CONTAINER,
                    tail_lines=lines,
                    limit_bytes=limit + 1,
                    _preload_content=False,
                )
                try:
                    data = response.read(limit + 1)  # bounded whatever the server sends
                finally:
                    response.release_conn()
            except (InfrastructureError, urllib3.exceptions.HTTPError, OSError) as error:
                # The outcome is known; a log we cannot read is not worth another try.
                logger.warning("no log tail for Pod %s: %s", pod_name, error)
                return ""
            if len(data) <= limit or lines == 1:
                break
            lines = max(1, min(lines // 2, data[:limit].count(b"\n") // 2))
        # Redacted before it is cut, so that a secret near the cut is still whole.
        return jobs.redact_secrets(data[:limit].decode("utf-8", errors="replace"), env)[
            -self.log_tail_chars :
        ]

    def _remove(self, name: str) -> bool:
        """Delete a Job the poll gave up on, so that nothing of it stays pending; whether
        it is gone (else the next poll finds it and tries again)."""
        try:
            self.stop(name)
        except InfrastructureError as error:
            logger.warning("could not delete Job %s: %s", name, error)
            return False
        return True

    # -- the API ------------------------------------------------------------------

    def _call(
        self,
        doing: str,
        method: Callable[..., T],
        *args: Any,
        passthrough: tuple[int, ...] = (),
        creating: bool = False,
        **kwargs: Any,
    ) -> T:
        """Call the API with the request timeout; its failures as the runner's errors,
        except the ``passthrough`` statuses, raised as they are. ``creating``: the call
        creates the try's Job (a 404 then means its namespace is missing)."""
        with _translated(doing, passthrough, creating):
            return method(*args, _request_timeout=self.request_timeout, **kwargs)


@contextlib.contextmanager
def _translated(doing: str, passthrough: tuple[int, ...], creating: bool) -> Iterator[None]:
    try:
        yield
    except ApiException as error:
        if error.status in passthrough:
            raise
        raise _classified(error, doing, creating) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        # Refused, reset, timed out, cut mid-answer: the API server is away or overloaded.
        raise TransientResourceError(
            f"Kubernetes API unreachable while {doing}: {type(error).__name__}: {error}", try_ended=False
        ) from error


def _classified(error: ApiException, doing: str, creating: bool) -> InfrastructureError:
    """The runner's error for an API answer. Whether the try is over (``try_ended``):
    a create the API refused outright (429, a full quota) made nothing, and a Job read
    as missing is gone; any other answer leaves the try as it was, or unknown (a 5xx or
    a timeout on a create may have made the Job)."""
    status = error.status or 0
    message = _status_message(error)
    text = f"Kubernetes API answered {status} ({error.reason}) while {doing}: {message}"
    if status == 429:
        retry_after = (error.headers or {}).get("Retry-After")
        if retry_after:
            text += f" (retry after {retry_after}s)"
        return TransientResourceError(text, try_ended=creating)
    if status == 0 or status >= 500 or status in (408, 409, 410):
        return TransientResourceError(text, try_ended=False)
    if status == 403 and "exceeded quota" in message:  # the namespace is full for now
        return TransientResourceError(text, try_ended=creating)
    if status == 404 and not creating:
        return TransientResourceError(f"vanished: {text}")
    # 400, 401, 404 on create, 422 (an invalid spec: bad resources, too long a command),
    # 403 (no right, or a policy refused it: Pod Security, an admission webhook that
    # allows only some images): the Job as configured can never run, and the cluster is
    # not under pressure for it.
    return PermanentRunnerError(text)


def _refused_for_good(message: str) -> bool:
    """Whether a refused Pod create is the spec's fault (forbidden by a policy,
    invalid, denied by an admission webhook) rather than a full quota or a webhook that
    did not answer, which pass."""
    return "exceeded quota" not in message and any(
        word in message for word in ("is forbidden", "is invalid", "denied the request")
    )


def _status_message(error: ApiException) -> str:
    """The ``Status`` message of an API error body, or what there is instead."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return (error.body or error.reason or "").strip()[:500]


def _without_client_retries(api_client: client.ApiClient) -> None:
    """No retries inside the client: a 5xx, a refused or a cut connection reaches the
    runner at once, to be counted by the circuit breaker and retried with backoff."""
    configuration = api_client.configuration
    configuration.retries = Retry(total=0, redirect=0)
    configuration.client_go_retries = False  # the client's own retry loop, from release 37
    replaced = api_client.rest_client
    # Release 37 closes a REST client; 36 (which botocore's python-dateutil bound keeps
    # here) only has its pool manager to clear.
    getattr(replaced, "close", replaced.pool_manager.clear)()
    api_client.rest_client = client.rest.RESTClientObject(configuration)


def _resources(resources: Resources) -> client.V1ResourceRequirements | None:
    requests = {
        key: value
        for key, value in (("cpu", resources.cpu_request), ("memory", resources.memory_request))
        if value
    }
    limits = {
        key: value
        for key, value in (("cpu", resources.cpu_limit), ("memory", resources.memory_limit))
        if value
    }
    if not requests and not limits:
        return None
    return client.V1ResourceRequirements(requests=requests or None, limits=limits or None)


def _newest_of(job: client.V1Job, pods: list[client.V1Pod]) -> client.V1Pod | None:
    """The newest of ``pods`` that ``job`` owns (by uid: a Job of the same name before
    it owns none), or None."""
    mine = [
        pod for pod in pods if any(ref.uid == job.metadata.uid for ref in pod.metadata.owner_references or ())
    ]
    return max(mine, key=lambda pod: pod.metadata.creation_timestamp, default=None)


def _controlled_by(pod: client.V1Pod, job_name: str) -> bool:
    return any(
        ref.kind == "Job" and ref.name == job_name and ref.controller
        for ref in pod.metadata.owner_references or ()
    )


def _settling(pod: client.V1Pod) -> bool:
    """Whether the Pod has ended or is being deleted: its Job may have finished (or be
    gone), so the Job has the last word."""
    phase = pod.status.phase if pod.status else ""
    return pod.metadata.deletion_timestamp is not None or phase in ("Succeeded", "Failed")


def _finished(job: client.V1Job | None) -> Any:
    if job is None:
        return None
    for condition in (job.status.conditions if job.status else None) or ():
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition
    return None


def _container_status(pod: client.V1Pod) -> Any:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    return next((s for s in statuses if s.name == CONTAINER), statuses[0] if statuses else None)


def _waiting(pod: client.V1Pod) -> Any:
    status = _container_status(pod)
    return status.state.waiting if status is not None and status.state else None


def _terminated(pod: client.V1Pod) -> Any:
    status = _container_status(pod)
    return status.state.terminated if status is not None and status.state else None


def _pod_condition(pod: client.V1Pod, kind: str) -> Any:
    conditions = (pod.status.conditions if pod.status else None) or ()
    return next((c for c in conditions if c.type == kind), None)


def _scheduled(pod: client.V1Pod) -> bool:
    condition = _pod_condition(pod, "PodScheduled")
    return condition is not None and condition.status == "True"


def _unscheduled_reason(pod: client.V1Pod | None) -> str:
    if pod is None:
        return "no Pod yet"
    condition = _pod_condition(pod, "PodScheduled")
    if condition is None:
        return "waiting for the scheduler"
    return ": ".join(part for part in (condition.reason, condition.message) if part)


def _eviction(pod: client.V1Pod) -> str:
    """Why the node took the Pod away (evicted, preempted, drained), or ""."""
    if pod.status and pod.status.reason == "Evicted":
        return f"Evicted: {pod.status.message or ''}".strip()
    condition = _pod_condition(pod, "DisruptionTarget")
    if condition is not None and condition.status == "True":
        return f"{condition.reason}: {condition.message or ''}".strip()
    return ""
