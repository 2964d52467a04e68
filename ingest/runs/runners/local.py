"""Hooks as processes on the worker's host: the runner without a cluster.

Same contract as the Kubernetes runner, so a new user's runs go end to end: the command
gets the same environment (the hook's own plus ``INGEST_BATCH_URL``), a time limit, and
its exit code and log tail are kept. The image and the resources are the cluster's
business and are not applied here. A launch runs the process to its end (the worker
waits, as it would wait on a Job), so there is never anything to poll: a hook found
launched but unfinished was cut off by its worker's death and is launched again.

The command is an argument list, never a shell line; the process gets a fresh session
(its whole group is killed at the time limit), a scratch directory as its working
directory, and only ``PATH``, ``LANG`` and the hook's variables in its environment.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from datetime import datetime

from ingest.runs.errors import PermanentRunnerError, TransientResourceError
from ingest.runs.runners.base import HookSpec, HookStatus, Phase

# Bytes of output read back for the log tail (the rest stays unread on disk).
LOG_READ_BYTES = 64 * 1024


class LocalRunner:
    def __init__(self, *, log_tail_chars: int = 4000) -> None:
        self.target = f"local:{socket.gethostname()}"
        self.log_tail_chars = log_tail_chars

    def launch(self, spec: HookSpec) -> HookStatus:
        env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": os.environ.get("LANG", "C.UTF-8"),
               **spec.env, "INGEST_BATCH_URL": spec.batch_location}
        with tempfile.TemporaryDirectory(prefix="conveyor-hook-") as scratch, \
                tempfile.TemporaryFile() as output:
            try:
                process = subprocess.Popen(
                    list(spec.command), cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                    stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
            except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
                raise PermanentRunnerError(
                    f"hook {spec.name}: cannot run {spec.command[0]!r}: {exc.strerror}") from exc
            except OSError as exc:  # out of processes or memory on the host: pressure
                raise TransientResourceError(f"hook {spec.name}: cannot start: {exc}") from exc
            try:
                code = process.wait(timeout=spec.timeout_seconds)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                return HookStatus(Phase.FAILED, pod_phase="Failed", reason="DeadlineExceeded",
                                  log_tail=self._tail(output))
            finally:
                if process.poll() is None:  # interrupted (the worker's own time limit)
                    _kill_group(process)
            if code == 0:
                return HookStatus(Phase.SUCCEEDED, pod_phase="Succeeded", exit_code=0,
                                  log_tail=self._tail(output))
            reason = f"killed by {signal.Signals(-code).name}" if code < 0 else "Error"
            return HookStatus(Phase.FAILED, pod_phase="Failed", exit_code=code, reason=reason,
                              log_tail=self._tail(output))

    def poll(self, spec: HookSpec, launched_at: datetime, now: datetime) -> HookStatus:
        # A launch here ends with its process; one still marked running lost its worker.
        raise TransientResourceError(f"hook {spec.name}: its process ended with its worker")

    def stop(self, name: str) -> None:
        """Nothing outlives its launch here."""

    def stop_labelled(self, labels: Mapping[str, str]) -> int:
        return 0

    def _tail(self, output) -> str:
        output.seek(0, os.SEEK_END)
        size = output.tell()
        output.seek(max(0, size - LOG_READ_BYTES))
        text = output.read().decode("utf-8", errors="replace")
        return text[-self.log_tail_chars:]


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
