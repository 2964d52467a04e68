"""The supervising parent of a local hook (``ingest/runs/runners/supervisor.py``): what it
reports for each way a hook ends or fails to start, how the runner reads that report,
and that nothing the hook started outlives it, however it ends."""

from __future__ import annotations

import errno
import io
import json
import marshal
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.runs.errors import PermanentRunnerError, TransientResourceError
from ingest.runs.runners import supervisor
from ingest.runs.runners.base import HookSpec, Phase
from ingest.runs.runners.local import SUPERVISOR, LocalRunner
from jobs.testing import wait_until
from jobs.time_limits import HandlerTimeout, Watcher
from tests.support.ingest.hook_processes import kill_marked, leaving_processes, marked

PATH = {"PATH": "/usr/bin:/bin"}


@pytest.fixture
def token() -> Iterator[str]:
    made = f"hook-mark-{uuid.uuid4().hex}"
    yield made
    kill_marked(made)  # what a failing runner left behind


def plan(command: tuple[str, ...] | list[str], output: int, scratch: str, **fields: Any) -> bytes:
    return marshal.dumps(
        {
            "parent": os.getpid(),
            "command": list(command),
            "env": PATH,
            "cwd": scratch,
            "timeout": 30,
            "output": output,
            "rlimits": [],
            "user": None,
            **fields,
        }
    )


def start(output: int) -> subprocess.Popen[bytes]:
    """The supervisor as the worker starts it, waiting for its plan on stdin."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(SUPERVISOR)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(output,),
    )


def supervise(*command: str, **fields: Any) -> tuple[dict[str, Any], str]:
    """Run ``command`` under the supervisor as the worker would: its report and output."""
    with tempfile.TemporaryFile() as output, tempfile.TemporaryDirectory() as scratch:
        process = start(output.fileno())
        stdout, stderr = process.communicate(plan(command, output.fileno(), scratch, **fields), timeout=60)
        assert process.returncode == 0, stderr.decode()
        output.seek(0)
        return (json.loads(stdout) if stdout else {}), output.read().decode()


# -- what the supervisor reports -----------------------------------------------------------


def test_an_exit_code_is_reported_with_the_hooks_output():
    assert supervise("/bin/sh", "-c", "echo hi; echo oops >&2; exit 3") == (
        {"outcome": "exit", "code": 3, "left": 0},
        "hi\noops\n",
    )


def test_a_signal_is_reported_as_a_negative_code():
    report, _ = supervise("/bin/sh", "-c", "kill -TERM $$")
    assert report == {"outcome": "exit", "code": -signal.SIGTERM, "left": 0}


def test_the_time_limit_is_reported_as_the_deadline():
    report, _ = supervise("/bin/sleep", "30", timeout=1)
    assert report == {"outcome": "deadline", "left": 0}


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["/no/such/program"], errno.ENOENT),
        (["no-such-program-on-the-path"], errno.ENOENT),  # looked for on the hook's PATH
        (["/tmp"], errno.EACCES),
        (["/bin/true", "x" * 200_000], errno.E2BIG),
        (["/" + "a" * 5000], errno.ENAMETOOLONG),
    ],
)
def test_a_command_that_cannot_start_is_reported_with_its_errno(command, code):
    report, output = supervise(*command)
    assert report == {"outcome": "failed", "stage": "exec", "errno": code, "left": 0}
    assert output == ""


def test_a_working_directory_that_is_gone_is_reported_as_such(tmp_path):
    report, _ = supervise("/bin/true", cwd=str(tmp_path / "gone"))
    assert report == {"outcome": "failed", "stage": "chdir", "errno": errno.ENOENT, "left": 0}


def test_a_limit_that_cannot_be_set_is_reported_as_a_confinement_failure():
    import resource

    report, _ = supervise("/bin/true", rlimits=[[resource.RLIMIT_NOFILE, 10, 5]])  # soft > hard
    assert (report["outcome"], report["stage"]) == ("failed", "confine")


def test_a_worker_gone_before_its_supervisor_started_leaves_nothing_started(tmp_path):
    started = tmp_path / "started"
    report, _ = supervise("/bin/sh", "-c", f"touch {started}", parent=1)
    assert report == {} and not started.exists()


def test_the_report_is_one_json_line():
    outcome = {"outcome": "failed", "stage": "exec", "errno": 7, "left": 0}
    line = supervisor.report_line(outcome)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == outcome


def test_a_signal_is_minus_its_number_and_an_exit_its_status():
    assert supervisor.exit_code(os.CLD_EXITED, 3) == 3
    assert supervisor.exit_code(os.CLD_KILLED, signal.SIGKILL) == -signal.SIGKILL
    assert supervisor.exit_code(os.CLD_DUMPED, signal.SIGSEGV) == -signal.SIGSEGV


# -- how the runner reads a report ---------------------------------------------------------

SPEC = HookSpec(name="conveyor-hook-1-1", image="unused", command=("/bin/true",))


def status_of(report: dict[str, Any]):
    return LocalRunner(path="/usr/bin:/bin", user="")._status(SPEC, report, io.BytesIO(b"log\n"), None)


@pytest.mark.parametrize(
    ("report", "phase", "code", "reason"),
    [
        ({"outcome": "exit", "code": 0}, Phase.SUCCEEDED, 0, ""),
        ({"outcome": "exit", "code": 3}, Phase.FAILED, 3, "Error"),
        (
            {"outcome": "exit", "code": -signal.SIGXCPU},
            Phase.FAILED,
            -signal.SIGXCPU,
            "killed by SIGXCPU (its CPU time limit)",
        ),
        ({"outcome": "deadline"}, Phase.FAILED, None, "DeadlineExceeded"),
    ],
)
def test_a_hooks_end_is_its_status(report, phase, code, reason):
    status = status_of({**report, "left": 0})
    assert (status.phase, status.exit_code, status.reason, status.log_tail) == (phase, code, reason, "log\n")


@pytest.mark.parametrize("stage", ["fork", "user", "exec"])
@pytest.mark.parametrize("code", [errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE])
def test_a_start_failing_for_want_of_processes_memory_or_descriptors_is_pressure(stage, code):
    with pytest.raises(TransientResourceError, match=os.strerror(code)):
        status_of({"outcome": "failed", "stage": stage, "errno": code, "left": 0})


@pytest.mark.parametrize(
    ("stage", "code"),
    [
        ("exec", errno.E2BIG),
        ("exec", errno.ENOENT),
        ("exec", errno.EACCES),
        ("exec", errno.ENOEXEC),
        ("exec", errno.ENAMETOOLONG),
        ("chdir", errno.ENOENT),
        ("user", errno.EPERM),
    ],
)
def test_any_other_start_failure_is_the_specs(stage, code):
    with pytest.raises(PermanentRunnerError, match=os.strerror(code)):
        status_of({"outcome": "failed", "stage": stage, "errno": code, "left": 0})


def test_a_hook_that_could_not_be_confined_is_the_specs():
    with pytest.raises(PermanentRunnerError, match="cannot confine it"):
        status_of({"outcome": "failed", "stage": "confine", "errno": 0, "left": 0})


def test_a_supervisor_that_ended_without_a_report_is_pressure_not_the_specs():
    with pytest.raises(TransientResourceError, match="without a report"):
        status_of({"outcome": "lost", "code": -signal.SIGKILL})


# -- nothing the hook started outlives it ----------------------------------------------------


def runner() -> LocalRunner:
    return LocalRunner(path="/usr/bin:/bin", user="")


def spec(command: tuple[str, ...], timeout: int = 60) -> HookSpec:
    return HookSpec(name="conveyor-hook-1-1", image="unused", command=command, timeout_seconds=timeout)


def test_what_a_hook_left_running_is_killed_when_it_exits(token):
    status = runner().launch(spec(leaving_processes(token)))
    assert status.phase == Phase.SUCCEEDED
    assert marked(token) == []  # at once: the report comes after the cleanup


def test_what_a_hook_started_is_killed_with_it_at_its_time_limit(token):
    status = runner().launch(spec(leaving_processes(token, "sleep 600"), timeout=1))
    assert status.reason == "DeadlineExceeded"
    assert marked(token) == []


def test_a_worker_interrupted_while_its_hook_runs_stops_the_hooks_whole_tree(token):
    watcher = Watcher(grace=30, on_stuck=lambda limit: None)
    with pytest.raises(HandlerTimeout):
        watcher.call(
            lambda: runner().launch(spec(leaving_processes(token, "sleep 600"))), seconds=1, job_id=0
        )
    assert marked(token) == []


def test_the_workers_sigterm_stops_the_hooks_whole_tree(token, tmp_path):
    with tempfile.TemporaryFile() as output:
        process = start(output.fileno())
        assert process.stdin is not None
        with process.stdin:
            process.stdin.write(plan(leaving_processes(token, "sleep 600"), output.fileno(), str(tmp_path)))
        process.stdin = None  # written and closed: communicate has nothing more to send
        # The shell, a sleep in its group, one in a session of its own, one double-forked
        # and the one it waits for.
        wait_until(lambda: len(marked(token)) == 5, 30, "the hook's five processes")
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=30)
    assert json.loads(stdout) == {"outcome": "stopped", "signal": signal.SIGTERM, "left": 0}
    assert marked(token) == []


def test_the_supervisor_imports_nothing_of_the_project():
    # It runs with -I -S: an import of the project (or of anything outside the standard
    # library) would fail there, not in the tests, which have both on their path.
    source = Path(supervisor.__file__).read_text()
    imported = {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.strip().startswith(("import ", "from "))
    }
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
