"""A fake Kubernetes API server for tests, speaking the real REST protocol over HTTP.

The code under test talks to it with the official ``kubernetes`` client exactly as to a
cluster: ``FakeCluster.kubeconfig(path)`` writes a kubeconfig (server, bearer token,
context) for ``kubernetes.config.new_client_from_config``. It serves the batch/v1 Jobs
and v1 Pods of its namespace on their real paths, with their JSON shapes, ``Status``
error bodies and newline-delimited watch streams, and plays the job controller, the
scheduler and the kubelet:

* creating a Job creates its Pod (``<job>-<5 characters>``, the controller's labels,
  an ownerReference to the Job); with ``capacity`` K at most K Pods hold a node, the
  others stay Pending and Unschedulable and get a node, oldest first, as one frees;
* a scheduled Pod is ContainerCreating, then Running, then terminated as its image's
  ``Behaviour`` says (run time, exit code, log; or an image that cannot be pulled, an
  invalid image name, a container that cannot be configured, an eviction); the Job
  follows (``Complete``; ``Failed`` with ``BackoffLimitExceeded``, or ``DeadlineExceeded``
  once ``activeDeadlineSeconds`` have passed, which kills its Pod), and
  ``ttlSecondsAfterFinished`` removes it with its Pods.

Time is the ``clock`` callable's (``ManualClock.now`` in tests). Nothing moves by
itself: each request first brings the cluster up to the clock's now, processing what
happened in between in order (a Pod that finished at 09:00:06 freed its node at
09:00:06), so a test advances the clock instead of sleeping. Faults are programmed per
request (``fail_next``, ``stall_next``), for every create (``refuse_creates``), for every
Pod the job controller tries to create (``refuse_pods``: an admission policy, which the
controller reports as a ``FailedCreate`` Event on the Job) or behind the client's back
(``vanish``); every request is recorded (``calls``, ``create_calls``, ``received_jobs``).

Usage::

    clock = ManualClock(T0)
    with FakeCluster(clock=clock.now, capacity=2) as cluster:
        cluster.behaviours["hooks/enrich:1"] = Behaviour(run_seconds=5, log="done\\n")
        api = kubernetes.config.new_client_from_config(
            config_file=str(cluster.kubeconfig(tmp_path / "kubeconfig")))
        ...                      # create a Job through ``api``
        clock.advance(10)        # the next request sees the Job Complete

Not modelled: other resources and API groups, updates and patches, pagination, more
than one container per Pod, restartPolicy OnFailure's in-place restarts (a failed Pod is
replaced as with Never).
"""

from __future__ import annotations

import copy
import json
import random
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

MAX_BODY_BYTES = 1024 * 1024  # a request body larger than this is refused (413)
MAX_EVENTS = 2000  # watch events kept; a watch from an older resourceVersion gets 410
MAX_CALLS = 100_000  # requests kept in ``calls``
DEFAULT_WATCH_SECONDS = 10.0  # a watch without timeoutSeconds ends after this (real time)
MAX_WATCH_SECONDS = 60.0
WATCH_TICK = 0.05  # seconds between a watch's looks at the clock
GRACE_SECONDS = 30  # a killed Pod stays, terminating, this long on the clock
PULL_BACKOFF_SECONDS = 10  # ErrImagePull turns into ImagePullBackOff after this
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName characters

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "AlreadyExists",
    410: "Expired",
    411: "BadRequest",
    413: "RequestEntityTooLarge",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
FAULT_MESSAGES = {
    400: "the server rejected our request for an unknown reason",
    401: "Unauthorized",
    403: 'jobs.batch is forbidden: User "system:serviceaccount:conveyor:worker" cannot '
    'create resource "jobs" in API group "batch" in the namespace "{namespace}"',
    404: "the server could not find the requested resource",
    409: "Operation cannot be fulfilled: the object has been modified",
    422: "Job.batch is invalid: spec.template.spec.containers[0].image: Required value",
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: etcdserver: request timed out",
    503: "the server is currently unable to handle the request",
    504: "Timeout: request did not complete within the allotted timeout",
}
EVICTION_MESSAGE = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, "
    "available: 51200Ki. Container hook was using 1843200Ki, request is "
    "256Mi, has larger consumption of memory. "
)


@dataclass(frozen=True)
class Behaviour:
    """What the container of an image does once its Pod has a node. Seconds are on the
    fake's clock; ``evict_after`` counts from the moment the container starts, and
    evicts only a container still running then."""

    run_seconds: float = 5.0
    exit_code: int = 0
    log: str = ""
    create_seconds: float = 1.0  # ContainerCreating before it runs
    reason: str = ""  # the terminated reason; "" is Completed or Error ("OOMKilled"...)
    pull_error: bool = False  # ErrImagePull, then ImagePullBackOff, for ever
    invalid_image: bool = False  # InvalidImageName
    config_error: str = ""  # CreateContainerConfigError with this message
    evict_after: float | None = None  # the kubelet evicts the Pod (memory pressure)

    @property
    def stuck(self) -> bool:
        return self.pull_error or self.invalid_image or bool(self.config_error)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, str]
    status: int


@dataclass
class _Fault:
    method: str
    path_prefix: str
    remaining: int
    status: int = 0  # 0: no answer of its own, only the delay
    message: str = ""
    retry_after: int | None = None
    delay: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        return self.remaining > 0 and self.method in ("*", method) and path.startswith(self.path_prefix)


@dataclass
class _Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False


@dataclass
class _WatchReply:
    kind: str
    namespace: str
    selector: list[tuple[str, str, tuple[str, ...]]]
    fields: dict[str, str]
    seconds: float
    backlog: list[dict[str, Any]]
    cursor: int
    expired: bool = False
    status: int = 200


@dataclass
class _Event:
    rv: int
    kind: str
    type: str
    obj: dict[str, Any]


@dataclass(eq=False)
class _Job:
    name: str
    namespace: str
    uid: str
    created_at: datetime
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    backoff_limit: int
    deadline: float | None
    ttl: float | None
    gone_succeeded: int = 0  # Pods removed since they finished (or were deleted)
    gone_failed: int = 0
    finished_at: datetime | None = None
    outcome: str = ""  # Complete | Failed
    reason: str = ""
    message: str = ""


@dataclass(eq=False)
class _Pod:
    name: str
    generate_name: str
    namespace: str
    uid: str
    seq: int
    created_at: datetime
    labels: dict[str, str]
    spec: dict[str, Any]
    behaviour: Behaviour
    owner: _Job | None
    scheduled_at: datetime | None = None
    node: str = ""
    ended_at: datetime | None = None
    end: str = ""  # succeeded | failed | evicted | killed
    deleting_at: datetime | None = None
    remove_at: datetime | None = None

    @property
    def container(self) -> dict[str, Any]:
        return self.spec["containers"][0]

    @property
    def running_at(self) -> datetime | None:
        if self.scheduled_at is None or self.behaviour.stuck:
            return None
        return self.scheduled_at + timedelta(seconds=self.behaviour.create_seconds)


def _ts(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(status: int, document: Any, headers: dict[str, str] | None = None) -> _Reply:
    return _Reply(status, json.dumps(document).encode(), headers=headers or {})


def status_body(
    code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` as the apiserver answers a failed request."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, ""),
        "details": details if details is not None else {},
        "code": code,
    }
    return body


def _failure(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
    close: bool = False,
    retry_after: int | None = None,
) -> _Reply:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if retry_after is not None:
        details = {**(details or {}), "retryAfterSeconds": retry_after}
    reply = _json(code, status_body(code, message, reason, details), headers)
    reply.close = close
    return reply


def _not_found(resource: str, name: str, group: str = "") -> _Reply:
    kind_name = f"{resource}.{group}" if group else resource
    details = {"name": name, "kind": resource, **({"group": group} if group else {})}
    return _failure(404, f'{kind_name} "{name}" not found', details=details)


def parse_label_selector(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """``a=b,c!=d,e,!f,g in (h,i),j notin (k)`` as (key, operator, values); ValueError
    for what the apiserver would refuse."""
    terms, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    requirements = []
    for term in (t.strip() for t in terms):
        if not term:
            continue
        if match := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", term):
            key, operator, values = match[1], match[2], match[3]
            requirements.append((key, operator, tuple(v.strip() for v in values.split(","))))
        elif match := re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*([^=!\s]*)", term):
            operator = "!=" if match[2] == "!=" else "="
            requirements.append((match[1], operator, (match[3],)))
        elif re.fullmatch(r"!?[^=!\s(),]+", term):
            key = term.lstrip("!")
            requirements.append((key, "!exists" if term.startswith("!") else "exists", ()))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    for key, _, values in requirements:
        if not _valid_label_key(key) or not all(LABEL_VALUE.match(v) and len(v) <= 63 for v in values):
            raise ValueError(f"invalid label selector: {text!r}")
    return requirements


def _selects(requirements: list[tuple[str, str, tuple[str, ...]]], labels: Mapping[str, str]) -> bool:
    for key, operator, values in requirements:
        present = key in labels
        value = labels.get(key)
        if operator == "=" and value != values[0]:
            return False
        if operator == "!=" and value == values[0]:
            return False
        if operator == "in" and value not in values:
            return False
        if operator == "notin" and value in values:
            return False
        if operator == "exists" and not present:
            return False
        if operator == "!exists" and present:
            return False
    return True


def _valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_VALUE.match(name))


def _label_causes(path: str, labels: Any) -> list[dict[str, str]]:
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [_cause(path, "FieldValueInvalid", "Invalid value: must be a map of strings")]
    causes = []
    for key, value in labels.items():
        if not _valid_label_key(key):
            causes.append(
                _cause(
                    path,
                    "FieldValueInvalid",
                    f'Invalid value: "{key}": name part must consist of '
                    "alphanumeric characters, '-', '_' or '.'",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            causes.append(
                _cause(
                    path,
                    "FieldValueInvalid",
                    f'Invalid value: "{value}": a valid label must be an empty '
                    "string or consist of alphanumeric characters, '-', '_' "
                    "or '.', and must start and end with an alphanumeric "
                    "character",
                )
            )
    return causes


def _cause(path: str, reason: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": path}


def _condition(
    kind: str, status: str, at: datetime | None, reason: str = "", message: str = ""
) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": _ts(at),
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


class FakeCluster:
    """One namespace of a cluster behind a real HTTP server; see the module docstring."""

    def __init__(
        self,
        clock: Callable[[], datetime] | None = None,
        capacity: int | None = None,
        namespace: str = "conveyor-hooks",
        token: str = "fake-cluster-token",
        behaviours: Mapping[str, Behaviour] | None = None,
        default: Behaviour | None = None,
        nodes: int = 3,
        seed: int = 0,
    ) -> None:
        self.clock = clock or (lambda: datetime.now(UTC))
        self.capacity = capacity
        self.namespace = namespace
        self.namespaces = {namespace}
        self.token = token
        self.behaviours: dict[str, Behaviour] = dict(behaviours or {})
        self.default = default or Behaviour()
        self.nodes = nodes
        self.unschedulable_message = (
            f"0/{nodes} nodes are available: {nodes} Insufficient cpu. preemption: "
            f"0/{nodes} nodes are available: {nodes} No preemption victims found for "
            "incoming pod."
        )
        self._random = random.Random(seed)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._jobs: dict[tuple[str, str], _Job] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._snapshots: dict[str, tuple[str, dict[str, Any]]] = {}  # uid -> (kind, object)
        self._events: deque[_Event] = deque(maxlen=MAX_EVENTS)
        self._rv = 1000
        self._seq = 0
        self._faults: list[_Fault] = []
        self._refusal: tuple[int, str] | None = None
        self._pod_refusal: str | None = None
        self._core_events: list[dict[str, Any]] = []  # v1 Events (the controller's reports)
        self._calls: deque[Call] = deque(maxlen=MAX_CALLS)
        self._create_calls = 0
        self._received: list[dict[str, Any]] = []
        self.errors: list[str] = []  # the fake's own failures, answered as 500s
        self._connections: set[socket.socket] = set()
        self._stopping = False
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.cluster = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}
        )

    # -- running ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}"

    @property
    def jobs_path(self) -> str:
        return f"/apis/batch/v1/namespaces/{self.namespace}/jobs"

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def start(self) -> FakeCluster:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection: the address refuses from now on."""
        with self._lock:
            self._stopping = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        if not self._stopping:
            self.stop()

    def kubeconfig(self, path: str | Path, *, token: str | None = None, context: str = "fake") -> Path:
        """Write a kubeconfig naming this server, a bearer-token user and a context."""
        path = Path(path)
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-cluster", "cluster": {"server": self.url}}],
            "users": [{"name": "conveyor", "user": {"token": token or self.token}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": "fake-cluster", "user": "conveyor", "namespace": self.namespace},
                }
            ],
            "current-context": context,
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    # -- programming it -----------------------------------------------------------

    def fail_next(
        self,
        method: str,
        path_prefix: str,
        status: int,
        *,
        times: int = 1,
        message: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next ``times`` requests of ``method`` ("*": any) whose path starts
        with ``path_prefix`` with a ``Status`` of ``status`` (429 carries Retry-After)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        if message is None:
            message = FAULT_MESSAGES.get(status, "fault").format(namespace=self.namespace)
        self._add_fault(_Fault(method.upper(), path_prefix, times, status, message, retry_after))

    def stall_next(self, method: str, path_prefix: str, seconds: float, *, times: int = 1) -> None:
        """Hold the next matching requests ``seconds`` of real time before answering them
        (a client's read timeout)."""
        self._add_fault(_Fault(method.upper(), path_prefix, times, delay=seconds))

    def _add_fault(self, fault: _Fault) -> None:
        with self._lock:
            self._faults = [f for f in self._faults if f.remaining > 0] + [fault]

    def refuse_pods(self, message: str | None) -> None:
        """From now on the job controller's Pod creates are refused with ``message`` (as
        an admission policy refuses them: the Job exists, no Pod does, and a FailedCreate
        Event on the Job says why); None: accepted again."""
        with self._lock:
            self._pod_refusal = message

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._core_events)

    def refuse_creates(self, status: int | None = 403, message: str | None = None) -> None:
        """Refuse every Job create with ``status`` from now on (None: accept again)."""
        with self._lock:
            if status is None:
                self._refusal = None
            else:
                if message is None:
                    message = FAULT_MESSAGES.get(status, "refused").format(namespace=self.namespace)
                self._refusal = (status, message)

    def vanish(self, job_name: str, namespace: str | None = None) -> None:
        """Delete a Job and its Pods behind the client's back (an operator's kubectl)."""
        with self._lock:
            now = self._advance()
            job = self._jobs.get((namespace or self.namespace, job_name))
            if job is None:
                raise KeyError(job_name)
            self._delete_job(job, "Background")
            self._publish(now)

    # -- looking at it ------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def count(self, method: str = "*", path_prefix: str = "") -> int:
        return sum(1 for c in self.calls if method in ("*", c.method) and c.path.startswith(path_prefix))

    @property
    def create_calls(self) -> int:
        """POSTs to a jobs collection, counted also when refused."""
        with self._lock:
            return self._create_calls

    @property
    def received_jobs(self) -> list[dict[str, Any]]:
        """The Job manifests as POSTed, parsed, refused ones included."""
        with self._lock:
            return copy.deepcopy(self._received)

    def job(self, name: str) -> dict[str, Any] | None:
        """The Job's JSON now (on the clock), or None."""
        with self._lock:
            self._advance()
            job = self._jobs.get((self.namespace, name))
            return copy.deepcopy(self._snapshots[job.uid][1]) if job else None

    def jobs(self) -> list[str]:
        with self._lock:
            self._advance()
            return sorted(name for ns, name in self._jobs if ns == self.namespace)

    def pods(self, job_name: str | None = None) -> list[dict[str, Any]]:
        """The Pods' JSON now (of one Job: those labelled with its name), oldest first."""
        with self._lock:
            self._advance()
            pods = sorted(self._pods.values(), key=lambda p: p.seq)
            return [
                copy.deepcopy(self._snapshots[p.uid][1])
                for p in pods
                if job_name is None or p.labels.get("job-name") == job_name
            ]

    # -- the HTTP side ------------------------------------------------------------

    def _serve(self, handler: _Handler) -> None:
        url = urlsplit(handler.path)
        path, method = url.path, handler.command
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        reply: _Reply | _WatchReply
        try:
            body = self._read_body(handler)
            if isinstance(body, _Reply):
                reply = body
            else:
                delay = self._take_stall(method, path)
                if delay:
                    # A stalled apiserver: the client's own timeout measures this in real
                    # time. Held on the condition so that stop() ends the stall.
                    with self._lock:
                        self._changed.wait_for(lambda: self._stopping, timeout=delay)
                reply = self._dispatch(method, path, query, handler.headers.get("Authorization", ""), body)
        except Exception as error:  # a bug of the fake: answered as the apiserver would
            with self._lock:
                self.errors.append(repr(error))
            reply = _failure(500, f"Internal error occurred: {error!r}")
        with self._lock:
            self._calls.append(Call(method, path, query, reply.status))
        if isinstance(reply, _WatchReply):
            self._stream(handler, reply)
        else:
            self._send(handler, reply)

    def _read_body(self, handler: _Handler) -> bytes | _Reply:
        if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
            return _failure(411, "chunked request bodies are not accepted", close=True)
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError:
            return _failure(400, "invalid Content-Length", close=True)
        if length > MAX_BODY_BYTES:
            return _failure(413, f"Request entity too large: limit is {MAX_BODY_BYTES}", close=True)
        return handler.rfile.read(length) if length > 0 else b""

    def _send(self, handler: _Handler, reply: _Reply) -> None:
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", reply.content_type)
            handler.send_header("Content-Length", str(len(reply.body)))
            handler.send_header("Cache-Control", "no-cache, private")
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            if reply.close:
                handler.send_header("Connection", "close")
                handler.close_connection = True
            handler.end_headers()
            handler.wfile.write(reply.body)
        except OSError:
            handler.close_connection = True

    def _stream(self, handler: _Handler, watch: _WatchReply) -> None:
        """A watch: chunked JSON lines until timeoutSeconds (real time) or the stop."""
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Transfer-Encoding", "chunked")
            handler.send_header("Cache-Control", "no-cache, private")
            handler.end_headers()
            self._write_events(handler, watch.backlog)
            deadline = time.monotonic() + watch.seconds
            cursor, expired = watch.cursor, watch.expired
            while not expired:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                with self._lock:
                    self._changed.wait(min(remaining, WATCH_TICK))
                    if self._stopping:
                        break
                    self._advance()
                    events, cursor, expired = self._events_since(cursor, watch)
                self._write_events(handler, events)
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True

    @staticmethod
    def _write_events(handler: _Handler, events: list[dict[str, Any]]) -> None:
        for event in events:
            line = json.dumps(event).encode() + b"\n"
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        handler.wfile.flush()

    def _take_stall(self, method: str, path: str) -> float:
        with self._lock:
            for fault in self._faults:
                if not fault.status and fault.matches(method, path):
                    fault.remaining -= 1
                    return fault.delay
        return 0.0

    def _dispatch(
        self, method: str, path: str, query: dict[str, str], authorization: str, body: bytes
    ) -> _Reply | _WatchReply:
        with self._lock:
            creating = (
                method == "POST" and re.fullmatch(r"/apis/batch/v1/namespaces/[^/]+/jobs", path) is not None
            )
            if creating:
                self._create_calls += 1
                try:
                    self._received.append(json.loads(body))
                except ValueError:
                    pass
            if authorization != f"Bearer {self.token}":
                return _failure(401, "Unauthorized")
            for fault in self._faults:
                if fault.status and fault.matches(method, path):
                    fault.remaining -= 1
                    return _failure(fault.status, fault.message, retry_after=fault.retry_after)
            if creating and self._refusal is not None:
                status, message = self._refusal
                return _failure(status, message)
            self._advance()
            route = next(
                ((resource, match) for pattern, resource in ROUTES if (match := pattern.fullmatch(path))),
                None,
            )
            if route is None:
                return _failure(404, "the server could not find the requested resource")
            resource, match = route
            action = getattr(self, f"_{resource}_{method.lower()}", None)
            if action is None:
                return _failure(405, "the server does not allow this method on the requested resource")
            return action(query, body, *match.groups())

    # -- the API ------------------------------------------------------------------

    def _jobs_get(self, query: dict[str, str], body: bytes, namespace: str):
        return self._list("jobs", namespace, query)

    def _pods_get(self, query: dict[str, str], body: bytes, namespace: str):
        return self._list("pods", namespace, query)

    def _jobs_post(self, query: dict[str, str], body: bytes, namespace: str) -> _Reply:
        if namespace not in self.namespaces:
            return _not_found("namespaces", namespace)
        try:
            manifest = json.loads(body)
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict):
            return _failure(
                400,
                "the body of the request was in an unknown format - accepted "
                "media types include: application/json, application/yaml",
            )
        if (manifest.get("apiVersion", "batch/v1"), manifest.get("kind", "Job")) != ("batch/v1", "Job"):
            return _failure(
                400,
                f"the API version in the data ({manifest.get('apiVersion')}) "
                "does not match the expected API version (batch/v1)",
            )
        metadata = manifest.get("metadata") or {}
        if metadata.get("namespace") not in (None, "", namespace):
            return _failure(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        name = metadata.get("name") or ""
        if not name and metadata.get("generateName"):
            name = self._generate(str(metadata["generateName"]))
        causes = self._validate_job(name, manifest)
        if causes:
            listed = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
            return _failure(
                422,
                f'Job.batch "{name}" is invalid: ' + (f"[{listed}]" if len(causes) > 1 else listed),
                details={"name": name, "group": "batch", "kind": "Job", "causes": causes},
            )
        if (namespace, name) in self._jobs:
            return _failure(
                409,
                f'jobs.batch "{name}" already exists',
                details={"name": name, "group": "batch", "kind": "jobs"},
            )
        if query.get("dryRun") == "All":
            return _json(201, manifest)
        now = self.clock()
        job = self._create_job(namespace, name, manifest, now)
        self._control(now)
        self._publish(now)
        return _json(201, self._snapshots[job.uid][1])

    def _jobs_delete(self, query: dict[str, str], body: bytes, namespace: str) -> _Reply:
        policy = self._policy(query, body)
        if isinstance(policy, _Reply):
            return policy
        try:
            selector = parse_label_selector(query.get("labelSelector", ""))
        except ValueError as error:
            return _failure(400, str(error))
        doomed = [
            job for (ns, _), job in self._jobs.items() if ns == namespace and _selects(selector, job.labels)
        ]
        items = []
        for job in doomed:
            items.append(self._item(self._snapshots[job.uid][1]))
            self._delete_job(job, policy)
        self._publish(self.clock())
        return _json(
            200,
            {
                "kind": "JobList",
                "apiVersion": "batch/v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": items,
            },
        )

    def _job_get(self, query: dict[str, str], body: bytes, namespace: str, name: str) -> _Reply:
        job = self._jobs.get((namespace, name))
        if job is None:
            return _not_found("jobs", name, "batch")
        return _json(200, self._snapshots[job.uid][1])

    def _job_delete(self, query: dict[str, str], body: bytes, namespace: str, name: str) -> _Reply:
        job = self._jobs.get((namespace, name))
        if job is None:
            return _not_found("jobs", name, "batch")
        policy = self._policy(query, body)
        if isinstance(policy, _Reply):
            return policy
        now = self.clock()
        last = copy.deepcopy(self._snapshots[job.uid][1])
        self._delete_job(job, policy)
        self._publish(now)
        if policy == "Background":
            return _json(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {"name": name, "group": "batch", "kind": "jobs", "uid": job.uid},
                },
            )
        # Orphan and Foreground go through a finalizer: the answer is the object, deleting.
        last["metadata"]["deletionTimestamp"] = _ts(now)
        last["metadata"]["deletionGracePeriodSeconds"] = 0
        last["metadata"]["finalizers"] = ["orphan" if policy == "Orphan" else "foregroundDeletion"]
        return _json(200, last)

    def _pod_get(self, query: dict[str, str], body: bytes, namespace: str, name: str) -> _Reply:
        pod = self._pods.get((namespace, name))
        if pod is None:
            return _not_found("pods", name)
        return _json(200, self._snapshots[pod.uid][1])

    def _pod_delete(self, query: dict[str, str], body: bytes, namespace: str, name: str) -> _Reply:
        pod = self._pods.get((namespace, name))
        if pod is None:
            return _not_found("pods", name)
        now = self.clock()
        last = copy.deepcopy(self._snapshots[pod.uid][1])
        last["metadata"]["deletionTimestamp"] = _ts(now)
        last["metadata"]["deletionGracePeriodSeconds"] = 0
        self._drop_pod(pod)
        self._control(now)
        self._publish(now)
        return _json(200, last)

    def _log_get(self, query: dict[str, str], body: bytes, namespace: str, name: str) -> _Reply:
        pod = self._pods.get((namespace, name))
        if pod is None:
            return _not_found("pods", name)
        container = pod.container["name"]
        if query.get("container", container) != container:
            return _failure(400, f"container {query['container']} is not valid for pod {name}")
        try:
            tail = int(query["tailLines"]) if "tailLines" in query else None
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
        except ValueError:
            return _failure(400, "tailLines and limitBytes must be integers")
        if (tail is not None and tail < 0) or (limit is not None and limit < 1):
            return _failure(422, f'Pod "{name}" is invalid: tailLines, limitBytes: Invalid value')
        if pod.scheduled_at is None:
            return _Reply(200, b"", "text/plain")  # no node yet: an empty log
        state = self._container_state(pod, self.clock())
        if "waiting" in state:
            why = {
                "ErrImagePull": "trying and failing to pull image",
                "ImagePullBackOff": "image can't be pulled",
            }.get(state["waiting"]["reason"], state["waiting"]["reason"])
            return _failure(400, f'container "{container}" in pod "{name}" is waiting to start: {why}')
        data = pod.behaviour.log.encode() if pod.running_at is not None else b""
        if tail is not None:
            data = b"".join(data.splitlines(keepends=True)[-tail:] if tail else [])
        if limit is not None:
            data = data[:limit]
        return _Reply(200, data, "text/plain")

    def _list(self, kind: str, namespace: str, query: dict[str, str]):
        try:
            selector = parse_label_selector(query.get("labelSelector", ""))
            fields = self._field_selector(query.get("fieldSelector", ""))
        except ValueError as error:
            return _failure(400, str(error))
        # As Go's strconv.ParseBool reads it: client releases send "true" or "True".
        if query.get("watch") in ("1", "t", "T", "true", "TRUE", "True"):
            return self._watch(kind, namespace, selector, fields, query)
        matching = sorted(
            (
                obj
                for k, obj in self._snapshots.values()
                if k == kind and self._matches(obj, namespace, selector, fields)
            ),
            key=lambda o: int(o["metadata"]["resourceVersion"]),
        )
        group = "batch/v1" if kind == "jobs" else "v1"
        return _json(
            200,
            {
                "kind": "JobList" if kind == "jobs" else "PodList",
                "apiVersion": group,
                "metadata": {"resourceVersion": str(self._rv)},
                "items": [self._item(obj) for obj in matching],
            },
        )

    def _watch(self, kind: str, namespace: str, selector, fields, query) -> _Reply | _WatchReply:
        try:
            seconds = float(query.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        except ValueError:
            return _failure(400, "timeoutSeconds must be a number")
        seconds = max(0.0, min(seconds, MAX_WATCH_SECONDS))
        watch = _WatchReply(kind, namespace, selector, fields, seconds, [], self._rv)
        since = query.get("resourceVersion", "")
        if since in ("", "0"):
            current = sorted(
                (
                    obj
                    for k, obj in self._snapshots.values()
                    if k == kind and self._matches(obj, namespace, selector, fields)
                ),
                key=lambda o: int(o["metadata"]["resourceVersion"]),
            )
            watch.backlog = [{"type": "ADDED", "object": obj} for obj in current]
            return watch
        if not since.isdigit():
            return _failure(400, f'resourceVersion: Invalid value: "{since}"')
        watch.backlog, watch.cursor, watch.expired = self._events_since(int(since), watch)
        return watch

    def _events_since(self, cursor: int, watch: _WatchReply):
        if self._events and self._events[0].rv > cursor + 1:
            oldest = self._events[0].rv - 1
            gone = status_body(410, f"too old resource version: {cursor} ({oldest})", "Expired")
            return [{"type": "ERROR", "object": gone}], self._rv, True
        events = [
            {"type": e.type, "object": e.obj}
            for e in self._events
            if e.rv > cursor
            and e.kind == watch.kind
            and self._matches(e.obj, watch.namespace, watch.selector, watch.fields)
        ]
        return events, self._rv, False

    @staticmethod
    def _field_selector(text: str) -> dict[str, str]:
        fields = {}
        for term in filter(None, (t.strip() for t in text.split(","))):
            key, equals, value = term.partition("=")
            key = key.rstrip("=")
            value = value.lstrip("=")
            if not equals or key not in ("metadata.name", "metadata.namespace"):
                raise ValueError(f'field label not supported: "{key}"')
            fields[key] = value
        return fields

    @staticmethod
    def _matches(obj: dict[str, Any], namespace: str, selector, fields: dict[str, str]) -> bool:
        metadata = obj["metadata"]
        return (
            metadata["namespace"] == namespace
            and _selects(selector, metadata.get("labels") or {})
            and fields.get("metadata.name", metadata["name"]) == metadata["name"]
            and fields.get("metadata.namespace", namespace) == namespace
        )

    @staticmethod
    def _item(obj: dict[str, Any]) -> dict[str, Any]:
        """A list's item: the object without kind and apiVersion, as the apiserver lists."""
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}

    @staticmethod
    def _policy(query: dict[str, str], body: bytes) -> str | _Reply:
        options: dict[str, Any] = {}
        if body:
            try:
                options = json.loads(body)
            except ValueError:
                return _failure(400, "the body of the request was in an unknown format")
        policy = query.get("propagationPolicy") or options.get("propagationPolicy")
        if policy is None and (
            query.get("orphanDependents") == "false" or options.get("orphanDependents") is False
        ):
            policy = "Background"
        policy = policy or "Orphan"  # batch/v1 Jobs orphan their Pods unless told otherwise
        if policy not in ("Orphan", "Background", "Foreground"):
            return _failure(
                422,
                f'propagationPolicy: Unsupported value: "{policy}": supported '
                'values: "Foreground", "Background", "Orphan"',
            )
        return policy

    def _validate_job(self, name: str, manifest: dict[str, Any]) -> list[dict[str, str]]:
        causes: list[dict[str, str]] = []
        metadata = manifest.get("metadata") or {}
        if not name:
            causes.append(
                _cause(
                    "metadata.name", "FieldValueRequired", "Required value: name or generateName is required"
                )
            )
        elif len(name) > 63:
            causes.append(
                _cause(
                    "metadata.name",
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": must be no more than 63 characters',
                )
            )
        elif not DNS_LABEL.match(name):
            causes.append(
                _cause(
                    "metadata.name",
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower '
                    "case alphanumeric characters or '-', and must start and end with an "
                    "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                )
            )
        causes += _label_causes("metadata.labels", metadata.get("labels"))
        spec = manifest.get("spec") or {}
        template = spec.get("template") or {}
        causes += _label_causes(
            "spec.template.metadata.labels", (template.get("metadata") or {}).get("labels")
        )
        pod = template.get("spec") or {}
        containers = pod.get("containers") or []
        if not isinstance(containers, list) or not containers:
            causes.append(_cause("spec.template.spec.containers", "FieldValueRequired", "Required value"))
            containers = []
        for index, container in enumerate(containers):
            where = f"spec.template.spec.containers[{index}]"
            container_name = container.get("name") if isinstance(container, dict) else None
            if not container_name:
                causes.append(_cause(f"{where}.name", "FieldValueRequired", "Required value"))
            elif not DNS_LABEL.match(container_name) or len(container_name) > 63:
                causes.append(
                    _cause(
                        f"{where}.name",
                        "FieldValueInvalid",
                        f'Invalid value: "{container_name}": a lowercase RFC '
                        "1123 label must consist of lower case alphanumeric "
                        "characters or '-'",
                    )
                )
            if not isinstance(container, dict) or not str(container.get("image") or "").strip():
                causes.append(_cause(f"{where}.image", "FieldValueRequired", "Required value"))
        if len(containers) > 1:
            causes.append(
                _cause(
                    "spec.template.spec.containers",
                    "FieldValueNotSupported",
                    "this fake runs one container per Pod",
                )
            )
        restart = pod.get("restartPolicy")
        if not restart:
            causes.append(
                _cause(
                    "spec.template.spec.restartPolicy",
                    "FieldValueRequired",
                    'Required value: valid values: "OnFailure", "Never"',
                )
            )
        elif restart not in ("Never", "OnFailure"):
            causes.append(
                _cause(
                    "spec.template.spec.restartPolicy",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
                )
            )
        for key, least in (
            ("backoffLimit", 0),
            ("activeDeadlineSeconds", 1),
            ("ttlSecondsAfterFinished", 0),
            ("parallelism", 0),
            ("completions", 1),
        ):
            value = spec.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
                relation = "greater than 0" if least else "greater than or equal to 0"
                causes.append(
                    _cause(
                        f"spec.{key}",
                        "FieldValueInvalid",
                        f"Invalid value: {json.dumps(value)}: must be {relation}",
                    )
                )
        for key in ("parallelism", "completions"):
            if spec.get(key, 1) != 1:
                causes.append(
                    _cause(f"spec.{key}", "FieldValueNotSupported", "this fake runs Jobs of one Pod")
                )
        return causes

    # -- the cluster --------------------------------------------------------------

    def _advance(self) -> datetime:
        """Bring the cluster up to the clock's now (under the lock)."""
        now = self.clock()
        if now.tzinfo is None:
            raise ValueError("the fake cluster's clock must return aware datetimes")
        self._simulate(now)
        self._publish(now)
        return now

    def _simulate(self, now: datetime) -> None:
        """Play what happened up to ``now`` in order: each Pod that ended, each deadline
        and TTL that passed, then what the job controller and the scheduler did about it
        at that moment."""
        for _ in range(100_000):
            due: tuple[datetime, Callable[[datetime], None]] | None = None

            def consider(at: datetime, action: Callable[[datetime], None]) -> None:
                nonlocal due
                if at <= now and (due is None or at < due[0]):
                    due = (at, action)

            for pod in list(self._pods.values()):
                running_at = pod.running_at
                if running_at is not None and pod.ended_at is None:
                    behaviour = pod.behaviour
                    finish = running_at + timedelta(seconds=behaviour.run_seconds)
                    if behaviour.evict_after is not None and behaviour.evict_after < behaviour.run_seconds:
                        consider(
                            running_at + timedelta(seconds=behaviour.evict_after),
                            partial(self._end_pod, pod, "evicted"),
                        )
                    else:
                        outcome = "succeeded" if behaviour.exit_code == 0 else "failed"
                        consider(finish, partial(self._end_pod, pod, outcome))
                if pod.remove_at is not None:
                    consider(pod.remove_at, partial(self._remove_pod, pod))
            for job in list(self._jobs.values()):
                if job.finished_at is None and job.deadline is not None:
                    consider(
                        job.created_at + timedelta(seconds=job.deadline), partial(self._exceed_deadline, job)
                    )
                if job.finished_at is not None and job.ttl is not None:
                    consider(job.finished_at + timedelta(seconds=job.ttl), partial(self._expire, job))
            if due is None:
                break
            at, action = due
            action(at)
            self._control(at)
        self._control(now)

    def _control(self, at: datetime) -> None:
        """The job controller, then the scheduler, at ``at``."""
        for job in list(self._jobs.values()):
            if job.finished_at is not None:
                continue
            pods = [p for p in self._pods.values() if p.owner is job]
            succeeded = job.gone_succeeded + sum(p.end == "succeeded" for p in pods)
            failed = job.gone_failed + sum(p.ended_at is not None and p.end != "succeeded" for p in pods)
            active = [p for p in pods if p.ended_at is None]
            if succeeded:
                self._finish(
                    job, at, "Complete", "CompletionsReached", "Reached expected number of succeeded pods"
                )
            elif failed > job.backoff_limit:
                for pod in active:
                    self._kill(pod, at)
                self._finish(
                    job, at, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
                )
            elif not active and self._pod_refusal is not None:
                self._failed_create(job, at, self._pod_refusal)
            elif not active:
                self._create_pod(job, at)
        holding = sum(1 for p in self._pods.values() if p.scheduled_at is not None and p.ended_at is None)
        for pod in sorted(self._pods.values(), key=lambda p: p.seq):
            if pod.scheduled_at is not None or pod.ended_at is not None:
                continue
            if self.capacity is not None and holding >= self.capacity:
                break
            pod.scheduled_at = at
            pod.node = f"node-{pod.seq % self.nodes + 1}"
            holding += 1

    def _create_job(self, namespace: str, name: str, manifest: dict[str, Any], now: datetime) -> _Job:
        uid = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
        metadata = manifest.get("metadata") or {}
        spec = copy.deepcopy(manifest["spec"])
        template = spec["template"]
        controller = {CONTROLLER_UID: uid, JOB_NAME: name, "controller-uid": uid, "job-name": name}
        template.setdefault("metadata", {})
        template["metadata"]["labels"] = {**(template["metadata"].get("labels") or {}), **controller}
        pod_spec = template["spec"]
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("terminationGracePeriodSeconds", GRACE_SECONDS)
        pod_spec.setdefault("securityContext", {})
        for container in pod_spec["containers"]:
            image = container["image"]
            latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
            container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})
        for key, value in (
            ("parallelism", 1),
            ("completions", 1),
            ("backoffLimit", 6),
            ("completionMode", "NonIndexed"),
            ("suspend", False),
            ("podReplacementPolicy", "TerminatingOrFailed"),
        ):
            spec.setdefault(key, value)
        spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
        labels = dict(metadata.get("labels") or template["metadata"]["labels"])
        job = _Job(
            name=name,
            namespace=namespace,
            uid=uid,
            created_at=now,
            labels=labels,
            annotations=dict(metadata.get("annotations") or {}),
            spec=spec,
            backoff_limit=spec["backoffLimit"],
            deadline=spec.get("activeDeadlineSeconds"),
            ttl=spec.get("ttlSecondsAfterFinished"),
        )
        self._jobs[(namespace, name)] = job
        return job

    def _failed_create(self, job: _Job, at: datetime, message: str) -> None:
        """The controller's report of a refused Pod create: one Event per Job, its count
        raised at each try, as the apiserver aggregates repeated events."""
        text = f"Error creating: {message}"
        for event in self._core_events:
            if event["involvedObject"]["uid"] == job.uid and event["message"] == text:
                event["count"] += 1
                event["lastTimestamp"] = _ts(at)
                return
        self._rv += 1
        self._core_events.append(
            {
                "metadata": {
                    "name": f"{job.name}.{self._random.getrandbits(64):016x}",
                    "namespace": job.namespace,
                    "resourceVersion": str(self._rv),
                    "creationTimestamp": _ts(at),
                },
                "involvedObject": {
                    "kind": "Job",
                    "namespace": job.namespace,
                    "name": job.name,
                    "uid": job.uid,
                    "apiVersion": "batch/v1",
                },
                "reason": "FailedCreate",
                "message": text,
                "type": "Warning",
                "count": 1,
                "source": {"component": "job-controller"},
                "firstTimestamp": _ts(at),
                "lastTimestamp": _ts(at),
            }
        )

    def _events_get(self, query: dict[str, str], body: bytes, namespace: str) -> _Reply:
        wanted = {}
        for term in filter(None, (t.strip() for t in query.get("fieldSelector", "").split(","))):
            key, equals, value = term.partition("=")
            if not equals or key not in EVENT_FIELDS:
                return _failure(
                    400, f'"{key}" is not a known field selector: only "{", ".join(sorted(EVENT_FIELDS))}"'
                )
            wanted[key] = value
        items = [
            event
            for event in self._core_events
            if event["metadata"]["namespace"] == namespace
            and all(_field(event, key) == value for key, value in wanted.items())
        ]
        return _json(
            200,
            {
                "kind": "EventList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": copy.deepcopy(items),
            },
        )

    def _create_pod(self, job: _Job, at: datetime) -> None:
        template = job.spec["template"]
        base = f"{job.name}-"[:58]
        name = self._generate(base)
        image = template["spec"]["containers"][0]["image"]
        spec = copy.deepcopy(template["spec"])
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        self._seq += 1
        pod = _Pod(
            name=name,
            generate_name=base,
            namespace=job.namespace,
            uid=str(uuid.UUID(int=self._random.getrandbits(128), version=4)),
            seq=self._seq,
            created_at=at,
            labels=dict(template["metadata"]["labels"]),
            spec=spec,
            behaviour=self.behaviours.get(image, self.default),
            owner=job,
        )
        self._pods[(job.namespace, name)] = pod

    def _generate(self, base: str) -> str:
        while True:
            name = base + "".join(self._random.choice(NAME_ALPHABET) for _ in range(5))
            if (self.namespace, name) not in self._pods and (self.namespace, name) not in self._jobs:
                return name

    def _finish(self, job: _Job, at: datetime, outcome: str, reason: str, message: str) -> None:
        job.finished_at, job.outcome, job.reason, job.message = at, outcome, reason, message

    def _end_pod(self, pod: _Pod, end: str, at: datetime) -> None:
        pod.ended_at, pod.end = at, end

    def _kill(self, pod: _Pod, at: datetime) -> None:
        if pod.scheduled_at is None:  # no kubelet has it: gone at once
            pod.ended_at, pod.end = at, "killed"
            self._drop_pod(pod)
            return
        pod.ended_at, pod.end = at, "killed"
        pod.deleting_at = at
        pod.remove_at = at + timedelta(seconds=GRACE_SECONDS)

    def _remove_pod(self, pod: _Pod, at: datetime) -> None:
        self._drop_pod(pod)

    def _drop_pod(self, pod: _Pod) -> None:
        """Forget a Pod; a Job counts one deleted before it finished as failed."""
        if pod.owner is not None:
            if pod.end == "succeeded":
                pod.owner.gone_succeeded += 1
            else:
                pod.owner.gone_failed += 1
        self._pods.pop((pod.namespace, pod.name), None)

    def _exceed_deadline(self, job: _Job, at: datetime) -> None:
        for pod in [p for p in self._pods.values() if p.owner is job and p.ended_at is None]:
            self._kill(pod, at)
        self._finish(job, at, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline")

    def _expire(self, job: _Job, at: datetime) -> None:
        self._delete_job(job, "Foreground")

    def _delete_job(self, job: _Job, policy: str) -> None:
        self._jobs.pop((job.namespace, job.name), None)
        for pod in [p for p in self._pods.values() if p.owner is job]:
            pod.owner = None  # orphaned: it runs on without its Job
            if policy != "Orphan":  # the garbage collector deletes it
                self._pods.pop((pod.namespace, pod.name), None)

    def _publish(self, now: datetime) -> None:
        """Render every object at ``now``; each one that changed gets a new
        resourceVersion and a watch event."""
        current: dict[str, tuple[str, dict[str, Any]]] = {}
        for job in self._jobs.values():
            current[job.uid] = ("jobs", self._render_job(job, now))
        for pod in self._pods.values():
            current[pod.uid] = ("pods", self._render_pod(pod, now))
        changed = False
        for uid, (kind, obj) in current.items():
            old = self._snapshots.get(uid)
            if old is not None:
                obj["metadata"]["resourceVersion"] = old[1]["metadata"]["resourceVersion"]
                if obj == old[1]:
                    continue
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._snapshots[uid] = (kind, obj)
            self._events.append(_Event(self._rv, kind, "MODIFIED" if old else "ADDED", obj))
            changed = True
        for uid in [uid for uid in self._snapshots if uid not in current]:
            kind, old_obj = self._snapshots.pop(uid)
            self._rv += 1
            gone = copy.deepcopy(old_obj)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._events.append(_Event(self._rv, kind, "DELETED", gone))
            changed = True
        if changed:
            self._changed.notify_all()

    def _render_job(self, job: _Job, now: datetime) -> dict[str, Any]:
        pods = [p for p in self._pods.values() if p.owner is job]
        active = [p for p in pods if p.ended_at is None]
        succeeded = job.gone_succeeded + sum(p.end == "succeeded" for p in pods)
        failed = job.gone_failed + sum(p.ended_at is not None and p.end != "succeeded" for p in pods)
        status: dict[str, Any] = {
            "startTime": _ts(job.created_at),
            "ready": sum(1 for p in active if self._running(p, now)),
            "terminating": sum(1 for p in pods if p.deleting_at is not None),
            "uncountedTerminatedPods": {},
        }
        if active:
            status["active"] = len(active)
        if succeeded:
            status["succeeded"] = succeeded
        if failed:
            status["failed"] = failed
        if job.finished_at is not None:
            target = "SuccessCriteriaMet" if job.outcome == "Complete" else "FailureTarget"
            status["conditions"] = [
                _condition(kind, "True", job.finished_at, job.reason, job.message)
                for kind in (target, job.outcome)
            ]
            if job.outcome == "Complete":
                status["completionTime"] = _ts(job.finished_at)
        metadata: dict[str, Any] = {
            "name": job.name,
            "namespace": job.namespace,
            "uid": job.uid,
            "resourceVersion": "",
            "generation": 1,
            "creationTimestamp": _ts(job.created_at),
            "labels": dict(job.labels),
        }
        if job.annotations:
            metadata["annotations"] = dict(job.annotations)
        return {
            "kind": "Job",
            "apiVersion": "batch/v1",
            "metadata": metadata,
            "spec": job.spec,
            "status": status,
        }

    def _running(self, pod: _Pod, now: datetime) -> bool:
        return pod.ended_at is None and pod.running_at is not None and pod.running_at <= now

    def _container_state(self, pod: _Pod, now: datetime) -> dict[str, Any]:
        behaviour, image = pod.behaviour, pod.container["image"]
        running_at = pod.running_at
        container_id = f"containerd://{uuid.UUID(pod.uid).hex * 2}"
        if pod.ended_at is not None:
            finished = _ts(pod.ended_at)
            if pod.end in ("succeeded", "failed"):
                reason = behaviour.reason or ("Completed" if pod.end == "succeeded" else "Error")
                return {
                    "terminated": {
                        "exitCode": behaviour.exit_code,
                        "reason": reason,
                        "startedAt": _ts(running_at),
                        "finishedAt": finished,
                        "containerID": container_id,
                    }
                }
            if running_at is not None and running_at <= pod.ended_at:
                return {
                    "terminated": {
                        "exitCode": 137 if pod.end == "evicted" else 143,
                        "reason": "Error",
                        "startedAt": _ts(running_at),
                        "finishedAt": finished,
                        "containerID": container_id,
                    }
                }
            return {
                "terminated": {
                    "exitCode": 137,
                    "reason": "ContainerStatusUnknown",
                    "message": "The container could not be located when the pod was terminated",
                    "finishedAt": finished,
                }
            }
        assert pod.scheduled_at is not None
        created = pod.scheduled_at + timedelta(seconds=behaviour.create_seconds)
        if behaviour.invalid_image:
            return {
                "waiting": {
                    "reason": "InvalidImageName",
                    "message": f'Failed to apply default image tag "{image}": '
                    f'couldn\'t parse image name "{image}": invalid '
                    "reference format",
                }
            }
        if now < created:
            return {"waiting": {"reason": "ContainerCreating"}}
        if behaviour.config_error:
            return {"waiting": {"reason": "CreateContainerConfigError", "message": behaviour.config_error}}
        if behaviour.pull_error:
            if now < created + timedelta(seconds=PULL_BACKOFF_SECONDS):
                return {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": f'failed to pull and unpack image "{image}": '
                        "failed to resolve reference: pull access "
                        "denied, repository does not exist or may "
                        "require authorization",
                    }
                }
            return {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}}
        return {"running": {"startedAt": _ts(running_at)}}

    def _render_pod(self, pod: _Pod, now: datetime) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": pod.name,
            "generateName": pod.generate_name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "resourceVersion": "",
            "creationTimestamp": _ts(pod.created_at),
            "labels": dict(pod.labels),
        }
        if pod.owner is not None:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": pod.owner.name,
                    "uid": pod.owner.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        if pod.deleting_at is not None:
            metadata["deletionTimestamp"] = _ts(pod.deleting_at)
            metadata["deletionGracePeriodSeconds"] = GRACE_SECONDS
        spec = dict(pod.spec)
        if pod.node:
            spec["nodeName"] = pod.node
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": metadata,
            "spec": spec,
            "status": self._pod_status(pod, now),
        }

    def _pod_status(self, pod: _Pod, now: datetime) -> dict[str, Any]:
        qos = self._qos(pod.container.get("resources") or {})
        if pod.scheduled_at is None:
            return {
                "phase": "Pending",
                "qosClass": qos,
                "conditions": [
                    _condition(
                        "PodScheduled", "False", pod.created_at, "Unschedulable", self.unschedulable_message
                    )
                ],
            }
        state = self._container_state(pod, now)
        running = "running" in state
        started = pod.running_at is not None and pod.running_at <= (pod.ended_at or now)
        container_status: dict[str, Any] = {
            "name": pod.container["name"],
            "image": pod.container["image"],
            "imageID": "",
            "ready": running,
            "restartCount": 0,
            "started": running,
            "state": state,
            "lastState": {},
        }
        if started:
            container_status["imageID"] = f"{pod.container['image']}@sha256:{uuid.UUID(pod.uid).hex * 2}"
            container_status["containerID"] = state.get("running", state.get("terminated", {})).get(
                "containerID", f"containerd://{uuid.UUID(pod.uid).hex * 2}"
            )
        if pod.ended_at is None:
            phase = "Running" if running else "Pending"
        else:
            phase = "Succeeded" if pod.end == "succeeded" else "Failed"
        changed_at = pod.ended_at or (pod.running_at if running else pod.scheduled_at)
        not_ready = "PodCompleted" if pod.ended_at is not None else "ContainersNotReady"
        ready = [
            _condition(kind, "True", changed_at)
            if running
            else _condition(
                kind,
                "False",
                changed_at,
                not_ready,
                "" if pod.ended_at else "containers with unready status: [hook]",
            )
            for kind in ("Ready", "ContainersReady")
        ]
        sandbox = pod.scheduled_at + timedelta(seconds=min(pod.behaviour.create_seconds, 1.0))
        if pod.ended_at is not None:
            sandbox_ready = _condition("PodReadyToStartContainers", "False", pod.ended_at)
        else:
            sandbox_ready = _condition(
                "PodReadyToStartContainers",
                "True" if now >= sandbox else "False",
                sandbox if now >= sandbox else pod.scheduled_at,
            )
        conditions = [
            sandbox_ready,
            _condition("Initialized", "True", pod.scheduled_at),
            *ready,
            _condition("PodScheduled", "True", pod.scheduled_at),
        ]
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": f"10.0.0.{pod.seq % 250 + 2}",
            "podIP": f"10.244.{pod.seq // 250}.{pod.seq % 250 + 2}",
            "startTime": _ts(pod.scheduled_at),
            "containerStatuses": [container_status],
            "qosClass": qos,
        }
        if pod.end == "evicted":
            status["reason"] = "Evicted"
            status["message"] = EVICTION_MESSAGE
            conditions.insert(
                0,
                _condition(
                    "DisruptionTarget", "True", pod.ended_at, "TerminationByKubelet", EVICTION_MESSAGE
                ),
            )
        return status

    @staticmethod
    def _qos(resources: dict[str, Any]) -> str:
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if not requests and not limits:
            return "BestEffort"
        if all(k in limits for k in ("cpu", "memory")) and all(
            requests.get(k, limits[k]) == limits[k] for k in ("cpu", "memory")
        ):
            return "Guaranteed"
        return "Burstable"


# The field selectors the apiserver supports on v1 Events (a subset: no source).
EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "reason",
        "type",
    }
)


def _field(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


ROUTES = [
    (re.compile(r"/api/v1/namespaces/([^/]+)/events"), "events"),
    (re.compile(r"/apis/batch/v1/namespaces/([^/]+)/jobs"), "jobs"),
    (re.compile(r"/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)"), "job"),
    (re.compile(r"/api/v1/namespaces/([^/]+)/pods"), "pods"),
    (re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)"), "pod"),
    (re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log"), "log"),
]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked watch streams
    server_version = "fake-kube-apiserver"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle holds the second
        # until the client's delayed ACK, 40 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.cluster._lock:
            self.server.cluster._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            with self.server.cluster._lock:
                self.server.cluster._connections.discard(self.connection)

    def _serve(self) -> None:
        self.server.cluster._serve(self)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    cluster: FakeCluster

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-request
