"""Hooks as processes on the worker's host: the runner without a cluster.

Same contract as the Kubernetes runner, so a new user's runs go end to end: the command
gets the same environment (the hook's own plus ``INGEST_BATCH_URL``), a time limit, and
its exit code and log tail are kept. The image and the requests are the cluster's
business and are not applied here. A launch runs the process to its end (the worker
waits, as it would wait on a Job), so there is never anything to poll: a hook found
launched but unfinished was cut off by its worker's death and is launched again.

The hook is not the worker's child but its supervisor's (``supervisor.py``, a program of
the standard library alone): a parent-death signal set on the hook would reach the hook
and not what it started, and a SIGKILLed worker left those running beside the rescued
copy. The supervisor is a child subreaper, so every process of the hook's tree stays
under it; it enforces the time limit, and when the hook exits, the limit passes, the
worker is interrupted (SIGTERM from here) or dies (its parent-death signal), it kills
the whole tree before it reports. The worker waits for that report at most the time
limit and ``BACKSTOP_SECONDS``. A worker that is only stopped (its lease lost) leaves
its hook running; what it writes once it wakes is refused by the lease fence.

A hook's command is not trusted with anything the worker has, so the process is
sandboxed as far as an unprivileged process can be without a container:

- its environment is built, never inherited: ``PATH`` (``INGEST_HOOK_PATH``), ``LANG``,
  ``HOME`` and ``TMPDIR`` (its scratch directory), the hook's variables and
  ``INGEST_BATCH_URL``; the worker's database URL, secret key and tokens are not in it;
- a worker running as root runs it as ``INGEST_HOOK_USER`` (``nobody``), with that user's
  group and no other, so it can read neither the worker's ``/proc/<pid>/environ`` nor
  its files; the batch is copied into the scratch directory it owns and
  ``INGEST_BATCH_URL`` points there. A worker that is not root cannot switch users: it
  makes itself non-dumpable instead (``PR_SET_DUMPABLE``), which keeps a process of the
  same user out of its ``/proc/<pid>/environ`` and ``mem``;
- resource limits: the largest file it may write (its output too, so it cannot fill the
  disk), CPU seconds from its time limit, address space from its memory limit, open
  files, no core dumps;
- its output is a bounded tail, with this process's secrets taken out before it is kept
  (``jobs.redact_secrets``): tenants read it.

The command is an argument list, never a shell line, and reaches the supervisor as data
on a pipe, never on a command line. A command the kernel refuses to start (too long an
argument list, too long a name, not executable, not there) is a fault of the hook's
spec and a ``PermanentRunnerError``; only a host out of processes, memory or file
descriptors is pressure (``TransientResourceError``): the supervisor reports the errno
of a failed start, and ``_launch_error`` sorts it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import logging
import marshal
import os
import pwd
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import fsspec

import jobs
from ingest.runs import catalogue
from ingest.runs.errors import PermanentRunnerError, TransientResourceError
from ingest.runs.runners.base import HookSpec, HookStatus, Phase
from intake import conf as intake_conf

# Bytes of output read back for the log tail (the rest stays unread on disk).
LOG_READ_BYTES = 64 * 1024
# The batch's copy in the scratch directory, which INGEST_BATCH_URL names.
BATCH_FILE = "batch.jsonl"
# CPU seconds beyond the time limit before the kernel's SIGKILL (SIGXCPU comes first).
CPU_GRACE_SECONDS = 5
# Errors of exec(2) that say the host is short of something: pressure, tried again later.
# Every other error (E2BIG, ENAMETOOLONG, ENOEXEC, EACCES, ENOENT, ...) is the spec's.
PRESSURE_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})
# prctl(2) options (linux/prctl.h).
PR_SET_DUMPABLE = 4
# The program every hook runs under (its docstring says what it does); standard library only.
SUPERVISOR = Path(__file__).with_name("supervisor.py")
# Beyond the hook's time limit, which its supervisor enforces, before the worker stops
# waiting for it anyway (a supervisor that failed to).
BACKSTOP_SECONDS = 15
# A stopped supervisor's bound to kill the hook's tree and exit (its cleanup is bounded
# at 5 s) before it is killed itself.
STOP_SECONDS = 10
# How often a wait for the supervisor lets an exception raised into its thread surface.
WAKE_SECONDS = 0.2
# The supervisor's report is one short line.
REPORT_MAX_BYTES = 4096

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """Who a hook runs as: a user and its primary group (no supplementary groups)."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Limits:
    """Resource limits of a hook's process (``resource.setrlimit``)."""

    max_file_bytes: int = 64 * 1024 * 1024
    max_open_files: int = 256
    # Processes (threads too) of the hook user at once: a fork bomb stops there. Applied
    # only to a user of the hooks' own, since the kernel counts every process of the
    # user, and the worker's own user runs the worker's threads.
    max_processes: int = 128


class LocalRunner:
    """Runs each hook as a sandboxed process on this host (see the module docstring)."""

    blocks = True  # a launch returns when the hook has ended

    def __init__(
        self, *, log_tail_chars: int = 4000, path: str = os.defpath, user: str = "", limits: Limits = Limits()
    ) -> None:
        self.target = f"local:{socket.gethostname()}"
        self.log_tail_chars = log_tail_chars
        self.path = path
        self.user = user
        self.limits = limits
        if not self._switches_user():
            # Hooks run as this process's own user: keep them out of its /proc files.
            make_non_dumpable()

    def launch(self, spec: HookSpec) -> HookStatus:
        identity = self._identity()
        with (
            tempfile.TemporaryDirectory(prefix="conveyor-hook-") as scratch,
            tempfile.TemporaryFile() as output,
        ):
            batch = _copy_batch(spec, Path(scratch))
            if identity is not None:
                os.chown(scratch, identity.uid, identity.gid)
            env = {
                "LANG": "C.UTF-8",
                **spec.env,
                "PATH": self.path,
                "HOME": scratch,
                "TMPDIR": scratch,
                "INGEST_BATCH_URL": batch,
            }
            plan = {
                "parent": os.getpid(),
                "command": list(spec.command),
                "env": env,
                "cwd": scratch,
                "timeout": spec.timeout_seconds,
                "output": output.fileno(),
                "rlimits": _rlimits(spec, self.limits, identity),
                "user": None if identity is None else (identity.uid, identity.gid),
            }
            report = _supervise(spec, plan, identity)
            return self._status(spec, report, output, identity)

    def poll(self, spec: HookSpec, launched_at: datetime, now: datetime) -> HookStatus:
        # A launch here ends with its process; one still marked running lost its worker.
        raise TransientResourceError(f"hook {spec.name}: its process ended with its worker")

    def stop(self, name: str) -> None:
        """Nothing outlives its launch here."""

    def stop_labelled(self, labels: Mapping[str, str]) -> int:
        return 0

    def _switches_user(self) -> bool:
        return bool(self.user) and os.geteuid() == 0

    def _identity(self) -> Identity | None:
        """Who hooks run as: ``user`` when this process is root and one is set; None
        (this process's own user) otherwise."""
        if not self._switches_user():
            return None
        try:
            entry = pwd.getpwnam(self.user)
        except KeyError:
            raise PermanentRunnerError(
                f"INGEST_HOOK_USER={self.user!r}: no such user on {socket.gethostname()}"
            ) from None
        if entry.pw_uid == 0:
            raise PermanentRunnerError(f"INGEST_HOOK_USER={self.user!r} is root: hooks never run as root")
        return Identity(self.user, entry.pw_uid, entry.pw_gid)

    def _status(
        self, spec: HookSpec, report: dict[str, Any], output: IO[bytes], identity: Identity | None
    ) -> HookStatus:
        """The supervisor's report as the hook's status, or the error a start failure is."""
        if report.get("left"):
            logger.warning("hook %s: %s of its processes outlived its cleanup", spec.name, report["left"])
        outcome = report.get("outcome")
        if outcome == "exit":
            code = int(report["code"])
            if code == 0:
                return HookStatus(
                    Phase.SUCCEEDED, pod_phase="Succeeded", exit_code=0, log_tail=self._tail(spec, output)
                )
            return HookStatus(
                Phase.FAILED,
                pod_phase="Failed",
                exit_code=code,
                reason=_reason(code),
                log_tail=self._tail(spec, output),
            )
        if outcome == "deadline":
            return HookStatus(
                Phase.FAILED, pod_phase="Failed", reason="DeadlineExceeded", log_tail=self._tail(spec, output)
            )
        raise _start_error(spec, report, identity)

    def _tail(self, spec: HookSpec, output: IO[bytes]) -> str:
        output.seek(0, os.SEEK_END)
        size = output.tell()
        output.seek(max(0, size - LOG_READ_BYTES))
        # Redacted before it is cut, so that a secret near the cut is still whole.
        text = jobs.redact_secrets(output.read().decode("utf-8", errors="replace"), spec.env)
        return text[-self.log_tail_chars :] if self.log_tail_chars > 0 else ""


def _reason(code: int) -> str:
    if code >= 0:
        return "Error"
    name = signal.Signals(-code).name
    limits = {"SIGXFSZ": "its file size limit", "SIGXCPU": "its CPU time limit"}
    return f"killed by {name}" + (f" ({limits[name]})" if name in limits else "")


def _launch_error(
    spec: HookSpec, exc: OSError, identity: Identity | None = None
) -> PermanentRunnerError | TransientResourceError:
    """A failed start, sorted: the host short of processes, memory or descriptors is
    pressure; anything else (E2BIG, ENAMETOOLONG, ENOEXEC, EACCES, ENOENT) is the spec's
    and no retry can help."""
    command = spec.command[0][:200] if spec.command else ""
    who = f" as {identity.name}" if identity is not None else ""
    text = f"hook {spec.name}: cannot run {command!r}{who}: {exc.strerror or exc}"
    if exc.errno in PRESSURE_ERRNOS:
        return TransientResourceError(text)
    return PermanentRunnerError(text)


def _copy_batch(spec: HookSpec, scratch: Path) -> str:
    """The batch copied into the scratch directory, where a hook running as another user
    can read it (the staging area is the worker's alone); its path, or "" for none."""
    if not spec.batch_location:
        return ""
    target = scratch / BATCH_FILE
    bound = intake_conf.staging_max_bytes()
    try:
        with (
            fsspec.open(spec.batch_location, "rb", **intake_conf.staging_options()) as source,
            open(target, "wb") as copy,
        ):
            copied = 0
            while chunk := source.read(1024 * 1024):
                copied += len(chunk)
                if copied > bound:
                    raise PermanentRunnerError(
                        f"hook {spec.name}: the batch is larger than INTAKE_STAGING_MAX_BYTES ({bound})"
                    )
                copy.write(chunk)
    except FileNotFoundError:
        raise PermanentRunnerError(f"hook {spec.name}: its batch is gone ({spec.batch_location})") from None
    except OSError as exc:  # the staging store is away: the host's trouble, not the spec's
        raise TransientResourceError(f"hook {spec.name}: cannot copy its batch: {exc}") from exc
    target.chmod(0o444)
    return str(target)


def memory_bytes(quantity: str) -> int | None:
    """A Kubernetes memory quantity in bytes ("512Mi" → 536870912); None if unset."""
    if not quantity:
        return None
    value = catalogue.quantity(quantity.strip())
    if value is None:
        raise PermanentRunnerError(f"memory limit {quantity!r} is not a Kubernetes quantity")
    return int(value)


def _rlimits(spec: HookSpec, limits: Limits, identity: Identity | None) -> list[tuple[int, int, int]]:
    """``(resource, soft, hard)`` for each limit the hook's process gets."""
    memory = memory_bytes(spec.resources.memory_limit)
    cpu = max(1, int(spec.timeout_seconds))
    wanted = [
        (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes),
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, cpu, cpu + CPU_GRACE_SECONDS),
    ]
    if memory is not None:
        wanted.append((resource.RLIMIT_AS, memory, memory))
    if identity is not None:
        wanted.append((resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes))
    return [(kind, *_within_hard_limit(kind, soft, hard)) for kind, soft, hard in wanted]


def _supervise(spec: HookSpec, plan: dict[str, Any], identity: Identity | None) -> dict[str, Any]:
    """Run the hook under its supervisor (``supervisor.py``) and wait for the report,
    at most the hook's time limit and ``BACKSTOP_SECONDS``. Interrupted (the engine's
    time limit for the handler raises in here), or past that bound, the supervisor is
    stopped, and its cleanup ends the hook's tree."""
    report_read, report_write = os.pipe()
    try:
        supervisor = subprocess.Popen(
            [sys.executable, "-I", "-S", str(SUPERVISOR)],
            stdin=subprocess.PIPE,
            stdout=report_write,
            env={},
            start_new_session=True,
            close_fds=True,
            pass_fds=(plan["output"],),
        )
    except OSError as exc:
        os.close(report_read)
        raise _launch_error(spec, exc, identity) from exc
    finally:
        os.close(report_write)
    report = b""
    try:
        _send(supervisor, marshal.dumps(plan))
        deadline = time.monotonic() + spec.timeout_seconds + BACKSTOP_SECONDS
        while chunk := _read(report_read, deadline):
            report = (report + chunk)[:REPORT_MAX_BYTES]
        supervisor.wait(STOP_SECONDS)
    except (subprocess.TimeoutExpired, TimeoutError):
        _stop(supervisor)
        return {"outcome": "deadline"}
    finally:
        if supervisor.poll() is None:  # interrupted
            _stop(supervisor)
        os.close(report_read)
    try:
        return json.loads(report) if report else {"outcome": "lost", "code": supervisor.returncode}
    except ValueError:
        return {"outcome": "lost", "code": supervisor.returncode}


def _send(supervisor: subprocess.Popen, plan: bytes) -> None:
    assert supervisor.stdin is not None
    try:
        with supervisor.stdin:
            supervisor.stdin.write(plan)
    except BrokenPipeError:  # it ended before reading: its report (or none) says why
        pass


def _read(fd: int, deadline: float) -> bytes:
    """What the supervisor wrote next (b"" once it closed its end); TimeoutError past the
    deadline. It waits in short slices: an exception raised into this thread (the
    handler's time limit) surfaces only between them."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        if select.select([fd], [], [], min(left, WAKE_SECONDS))[0]:
            return os.read(fd, REPORT_MAX_BYTES)


def _stop(supervisor: subprocess.Popen) -> None:
    """SIGTERM: the supervisor kills the hook's tree and exits. One that has not within
    ``STOP_SECONDS`` is killed with its group (the hook dies with it, by its parent-death
    signal)."""
    try:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        logger.warning("hook supervisor %s did not stop in %ss: killed", supervisor.pid, STOP_SECONDS)
        try:
            os.killpg(supervisor.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        supervisor.wait()


def _start_error(
    spec: HookSpec, report: dict[str, Any], identity: Identity | None
) -> PermanentRunnerError | TransientResourceError:
    """A report that is no outcome of the hook: why it did not start, or why its
    supervisor ended without saying."""
    if report.get("outcome") == "failed":
        number = int(report.get("errno") or 0)
        if report.get("stage") == "confine":
            why = os.strerror(number) if number else "a limit out of range"
            return PermanentRunnerError(f"hook {spec.name}: cannot confine it: {why}")
        return _launch_error(spec, OSError(number, os.strerror(number)), identity)
    if report.get("outcome") == "stopped":
        return TransientResourceError(
            f"hook {spec.name}: its supervisor was stopped by signal {report.get('signal')}"
        )
    return TransientResourceError(
        f"hook {spec.name}: its supervisor ended without a report (exit status {report.get('code')})"
    )


def _within_hard_limit(kind: int, soft: int, hard: int) -> tuple[int, int]:
    """``(soft, hard)`` lowered to this process's own hard limit, which an unprivileged
    process cannot raise (a host stricter than the settings keeps its own bound)."""
    current = resource.getrlimit(kind)[1]
    if current == resource.RLIM_INFINITY:
        return soft, hard
    return min(soft, current), min(hard, current)


def make_non_dumpable() -> bool:
    """Make this process non-dumpable, so that a process of the same user (a hook) can
    read neither its ``/proc/<pid>/environ`` nor its memory; whether it could (Linux
    only; elsewhere nothing happens). Process-wide and idempotent: cheap to call again."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl
