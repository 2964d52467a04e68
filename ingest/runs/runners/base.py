"""The contract every hook runner keeps, whether it starts a Kubernetes Job or a local
process.

A hook execution is identified by ``HookSpec.name``, which the pipeline derives from
rows it committed before asking: launching the same name again (a worker died between
the launch and recording it) adopts what is there instead of starting a second one.
``launch`` and ``poll`` return the hook's ``HookStatus`` and raise
``TransientResourceError`` or ``PermanentRunnerError`` (``ingest.runs.errors``) when the
infrastructure, not the hook, failed. A hook that ran and exited non-zero is a
``Phase.FAILED`` status with its exit code and the tail of its log, never an exception.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


class Phase(enum.StrEnum):
    PENDING = "pending"  # accepted, not started (a Pod waiting to be scheduled)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the hook ran and failed: exit code, reason, log tail

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


@dataclass(frozen=True)
class Resources:
    """Kubernetes quantities ("250m", "512Mi"); empty means unset."""

    cpu_request: str = ""
    memory_request: str = ""
    cpu_limit: str = ""
    memory_limit: str = ""


@dataclass(frozen=True)
class HookSpec:
    # Unique per execution and try, a valid Kubernetes name (lower case, digits, '-',
    # at most 63 characters): ``conveyor-hook-<execution>-<try>``.
    name: str
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Resources = Resources()
    # Seconds the hook may run once started (a Job's activeDeadlineSeconds).
    timeout_seconds: int = 600
    # Where the batch's records are (an fsspec URL or a local path); also in the env as
    # INGEST_BATCH_URL.
    batch_location: str = ""
    # conveyor.io/run, conveyor.io/batch, conveyor.io/tenant, conveyor.io/hook.
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HookStatus:
    phase: Phase
    pod_phase: str = ""  # the runner's own word for where the hook is (a Pod's phase)
    exit_code: int | None = None
    reason: str = ""  # why it is pending or failed, in the runner's words
    log_tail: str = ""
    # The hook holds its place on the cluster (a Pod bound to a node, a local process):
    # the runner target had room for it.
    scheduled: bool = False


class HookRunner(Protocol):
    # What the circuit breaker counts failures against: one cluster and namespace, or
    # this host for local processes.
    target: str
    blocks: bool
    """Whether ``launch`` waits for the hook to end (local) rather than start it for ``poll``."""

    def launch(self, spec: HookSpec) -> HookStatus:
        """Start the hook (or adopt the one already started under ``spec.name``)."""

    def poll(self, spec: HookSpec, launched_at: datetime, now: datetime) -> HookStatus:
        """Where the hook is now. A hook still unscheduled ``schedule timeout`` after
        ``launched_at`` raises ``TransientResourceError`` (and is removed first)."""

    def stop(self, name: str) -> None:
        """Remove the hook's Job or process, if it is still there."""

    def stop_labelled(self, labels: Mapping[str, str]) -> int:
        """Remove every hook carrying these labels (a cancelled run's); how many."""
