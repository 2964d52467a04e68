"""The local hook runner's sandbox: what a hook's process gets, what it cannot reach, and
how a hook that cannot start is sorted (its spec's fault, or the host's pressure).

A hostile hook's first move is its worker's environment (the database URL, the secret
key, tokens): through its own environment, then through ``/proc/<parent>/environ``.
Running as root, the runner switches hooks to an unprivileged user; not root, it makes
the worker non-dumpable. Both are shown here with real processes: the second by running
the runner in a child process that is uid 0 without any capability, which the kernel
treats as any ordinary user would be (same uid as its hook, no CAP_SYS_PTRACE)."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ingest.runs import services
from ingest.runs.errors import PermanentRunnerError, TransientResourceError
from ingest.runs.models import BatchStatus, BreakerState, HookExecution, RunnerBreaker
from ingest.runs.runners.base import HookSpec, Phase, Resources
from ingest.runs.runners.local import Limits, LocalRunner, _launch_error, memory_bytes
from jobs.redaction import REDACTED
from jobs.testing import wait_until
from tests.support.drive import drain
from tests.support.ingest import builders
from tests.support.ingest.hook_processes import alive

ROOT = Path(__file__).resolve().parents[2]
# The hook's parent is its supervisor; the worker is the supervisor's parent.
READ_WORKER_ENVIRON = ("/bin/sh", "-c", "tr '\\0' '\\n' </proc/$(cut -d' ' -f4 /proc/$PPID/stat)/environ")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
# setpriv: this process's uid (0) with no capability at all, kept across exec (noroot).
WITHOUT_CAPABILITIES = [
    "setpriv",
    "--inh-caps=-all",
    "--ambient-caps=-all",
    "--bounding-set=-all",
    "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked",
    "--",
]


def spec(*command: str, **options) -> HookSpec:
    return HookSpec(name="conveyor-hook-1-1", image="unused", command=command, **options)


def runner(**options) -> LocalRunner:
    return LocalRunner(**{"path": "/usr/bin:/bin", "user": "", **options})


# -- what a hook gets --------------------------------------------------------------


def test_a_hook_gets_only_the_environment_built_for_it(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://conveyor:pw@db/conveyor")
    monkeypatch.setenv("WORKER_ONLY", "inherited")
    status = runner(path="/usr/local/bin:/usr/bin:/bin").launch(
        spec("/usr/bin/env", env={"MODE": "fast", "PATH": "/tmp/evil", "HOME": "/root"})
    )
    env = dict(line.split("=", 1) for line in status.log_tail.splitlines())
    assert set(env) == {"LANG", "MODE", "PATH", "HOME", "TMPDIR", "INGEST_BATCH_URL"}
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"  # the setting's, not the spec's
    assert env["HOME"] == env["TMPDIR"] and env["HOME"].startswith("/tmp/conveyor-hook-")
    assert env["MODE"] == "fast" and env["INGEST_BATCH_URL"] == ""


def test_the_default_path_finds_conveyors_python():
    from ingest import conf

    status = LocalRunner(path=conf.get("HOOK_PATH"), user="").launch(
        spec("/bin/sh", "-c", "command -v python")
    )
    assert status.log_tail.strip() == str(Path(sys.executable).parent / "python")


def test_the_batch_is_copied_into_the_hooks_scratch_directory(tmp_path):
    staged = tmp_path / "staged-batch"
    staged.write_text('{"id": 1}\n')
    staged.chmod(0o600)
    status = runner().launch(
        spec("/bin/sh", "-c", 'echo "$INGEST_BATCH_URL"; cat "$INGEST_BATCH_URL"', batch_location=str(staged))
    )
    where, content = status.log_tail.splitlines()
    assert where.startswith("/tmp/conveyor-hook-") and where.endswith("/batch.jsonl")
    assert content == '{"id": 1}'


def test_a_batch_that_is_gone_is_a_permanent_failure(tmp_path):
    with pytest.raises(PermanentRunnerError, match="its batch is gone"):
        runner().launch(spec("/bin/true", batch_location=str(tmp_path / "missing")))


def test_the_limits_are_set_on_the_hooks_process():
    status = runner(limits=Limits(max_file_bytes=1024 * 1024, max_open_files=64)).launch(
        spec(
            "/bin/sh",
            "-c",
            "ulimit -t; ulimit -f; ulimit -n; ulimit -v; ulimit -c",
            timeout_seconds=30,
            resources=Resources(memory_limit="256Mi"),
        )
    )
    # dash: seconds, 512-byte blocks, files, kilobytes, blocks.
    assert status.log_tail.split() == ["30", "2048", "64", "262144", "0"]


def test_a_host_stricter_than_the_settings_keeps_its_own_hard_limit():
    script = textwrap.dedent("""
        import django
        django.setup()
        from ingest.runs.runners.local import LocalRunner
        from ingest.runs.runners.base import HookSpec
        print(LocalRunner(path="/usr/bin:/bin", user="").launch(HookSpec(
            name="conveyor-hook-1-1", image="unused", command=("/bin/sh", "-c", "ulimit -n"))
        ).log_tail.strip())
    """)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "project.test_settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "100"  # not 256, which it could not raise to


def test_a_hook_cannot_write_more_than_its_file_size_limit():
    status = runner(limits=Limits(max_file_bytes=64 * 1024)).launch(
        spec("/usr/bin/head", "-c", "1000000", "/dev/zero")
    )
    assert status.phase == Phase.FAILED
    assert status.reason == "killed by SIGXFSZ (its file size limit)"


def test_memory_quantities_are_read_as_kubernetes_writes_them():
    assert memory_bytes("512Mi") == 512 * 1024 * 1024
    assert memory_bytes("1G") == 10**9
    assert memory_bytes("") is None
    with pytest.raises(PermanentRunnerError, match="not a Kubernetes quantity"):
        memory_bytes("lots")


def test_secrets_in_a_hooks_output_are_taken_out_before_it_is_kept(settings):
    settings.EXPORTS_WORKER_TOKEN = "worker-token-0123456789"
    status = runner().launch(
        spec(
            "/bin/sh",
            "-c",
            'echo "token=$LEAK"; echo "url=postgresql://app:pw-1234@db/app"',
            env={"LEAK": "worker-token-0123456789"},
        )
    )
    assert status.log_tail.splitlines() == [f"token={REDACTED}", f"url=postgresql://app:{REDACTED}@db/app"]


def test_the_secrets_of_the_hooks_own_environment_are_taken_out_of_its_output():
    # The entry's fixed environment is the operators': tenants are not shown it, and
    # would read it in the log tail if the hook printed it.
    status = runner().launch(
        spec(
            "/bin/sh",
            "-c",
            'echo "key=$VENDOR_API_KEY mode=$MODE"',
            env={"VENDOR_API_KEY": "entry-api-key-0123456789", "MODE": "strict-mode-on"},
        )
    )
    assert status.log_tail.strip() == f"key={REDACTED} mode=strict-mode-on"


# -- what a hook cannot reach ------------------------------------------------------------


@as_root
def test_as_root_a_hook_runs_as_the_hook_user_and_cannot_read_its_workers_environ():
    mine = Path("/proc/self/environ").read_bytes().split(b"\0")[0].decode()
    status = LocalRunner(path="/usr/bin:/bin", user="nobody").launch(
        spec("/bin/sh", "-c", "id -u; id -G; " + READ_WORKER_ENVIRON[2])
    )
    uid, groups, *rest = status.log_tail.splitlines()
    assert (uid, groups) == ("65534", "65534")  # nobody, its own group, no other
    assert "Permission denied" in status.log_tail
    assert mine not in status.log_tail


@as_root
def test_as_root_the_hook_users_processes_are_bounded():
    status = LocalRunner(path="/usr/bin:/bin", user="nobody", limits=Limits(max_processes=32)).launch(
        spec("/bin/sh", "-c", "ulimit -p")
    )
    assert status.log_tail.strip() == "32"


def test_the_workers_own_user_gets_no_process_bound():
    assert runner().launch(spec("/bin/sh", "-c", "ulimit -p")).log_tail.strip() != "128"


@as_root
def test_as_root_the_hook_user_reads_the_batch_the_worker_staged_privately(tmp_path):
    staged = tmp_path / "staged-batch"
    staged.write_text('{"id": 7}\n')
    staged.chmod(0o600)
    status = LocalRunner(path="/usr/bin:/bin", user="nobody").launch(
        spec("/bin/sh", "-c", 'cat "$INGEST_BATCH_URL"; cat ' + str(staged), batch_location=str(staged))
    )
    first, second = status.log_tail.splitlines()
    assert first == '{"id": 7}'
    assert "Permission denied" in second  # the original stays the worker's


def test_a_hook_user_that_is_root_or_missing_is_refused():
    if os.geteuid() != 0:
        pytest.skip("the user is only looked up by a root worker")
    with pytest.raises(PermanentRunnerError, match="never run as root"):
        LocalRunner(user="root").launch(spec("/bin/true"))
    with pytest.raises(PermanentRunnerError, match="no such user"):
        LocalRunner(user="no-such-user-here").launch(spec("/bin/true"))


WORKER = textwrap.dedent("""
    import json, sys
    import django
    django.setup()
    from ingest.runs.runners import local
    if sys.argv[1] == "dumpable":
        local.make_non_dumpable = lambda: False  # the runner as it was: the control
    from ingest.runs.runners.base import HookSpec
    status = local.LocalRunner(path="/usr/bin:/bin", user="").launch(HookSpec(
        name="conveyor-hook-1-1", image="unused", command=tuple(sys.argv[2:])))
    print(json.dumps(status.log_tail))
""")


def run_worker(mode: str, command: tuple[str, ...]) -> str:
    prefix = WITHOUT_CAPABILITIES if os.geteuid() == 0 else []
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "project.test_settings",
        "WORKER_CANARY": "canary-b2c7d1",
    }
    done = subprocess.run(
        [*prefix, sys.executable, "-c", WORKER, mode, *command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_worker_that_cannot_switch_users_keeps_a_hook_of_its_own_user_out_of_its_environ():
    assert "WORKER_CANARY=canary-b2c7d1" in run_worker("dumpable", READ_WORKER_ENVIRON)
    tail = run_worker("non-dumpable", READ_WORKER_ENVIRON)
    assert "canary" not in tail and "Permission denied" in tail


def test_a_hook_dies_with_its_worker(tmp_path):
    pid_file = tmp_path / "hook.pid"
    script = textwrap.dedent(f"""
        import django
        django.setup()
        from ingest.runs.runners.local import LocalRunner
        from ingest.runs.runners.base import HookSpec
        LocalRunner(path="/usr/bin:/bin", user="").launch(HookSpec(
            name="conveyor-hook-1-1", image="unused", timeout_seconds=600,
            command=("/bin/sh", "-c", "echo $$ > {pid_file}; exec sleep 600")))
    """)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "project.test_settings",
    }
    worker = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=ROOT)
    try:
        hook = int(
            wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the hook to start")
        )
        worker.kill()
        worker.wait(timeout=30)
        wait_until(lambda: not alive(hook), what="the hook to die with its worker")
    finally:
        worker.kill()
        worker.wait(timeout=30)


# -- a hook that cannot start ----------------------------------------------------------


def test_a_200_kb_argument_is_the_hooks_fault_not_pressure():
    with pytest.raises(PermanentRunnerError, match="Argument list too long"):
        runner().launch(spec("/bin/true", "x" * 200_000))


def test_too_long_a_name_and_a_file_that_is_no_program_are_the_hooks_fault(tmp_path):
    with pytest.raises(PermanentRunnerError, match="File name too long"):
        runner().launch(spec("/" + "a" * 5000))
    script = tmp_path / "no-shebang"
    script.write_text("echo hi\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    with pytest.raises(PermanentRunnerError, match="Exec format error"):
        runner().launch(spec(str(script)))
    with pytest.raises(PermanentRunnerError, match="No such file"):
        runner().launch(spec(str(tmp_path / "missing")))


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE])
def test_a_host_out_of_processes_memory_or_descriptors_is_pressure(code):
    assert isinstance(
        _launch_error(spec("/bin/true"), OSError(code, os.strerror(code))), TransientResourceError
    )


@pytest.mark.parametrize(
    "code",
    [errno.E2BIG, errno.ENAMETOOLONG, errno.ENOEXEC, errno.EACCES, errno.ENOENT, errno.EPERM, errno.ELOOP],
)
def test_every_other_start_failure_is_permanent(code):
    assert isinstance(
        _launch_error(spec("/bin/true"), OSError(code, os.strerror(code))), PermanentRunnerError
    )


@pytest.mark.django_db(transaction=True)
def test_a_200_kb_argument_fails_its_hook_and_the_breaker_counts_nothing(clock, acme, settings):
    # The catalogue refuses such an argument list before any launch; with its bound
    # raised, the kernel's refusal must still be the hook's failure, not pressure.
    settings.INGEST_HOOK_MAX_ARGUMENT_BYTES = 1_000_000
    source = builders.source(acme, batches=1, hooks=[["true", "x" * 200_000]])
    run = services.start_ingest(source)
    drain(clock)
    execution = HookExecution.objects.get(batch__run=run)
    assert execution.status == "failed"
    assert "Argument list too long" in execution.reason
    assert run.batches.get().status == BatchStatus.HOOKS_FAILED
    assert execution.tries == 1  # not retried: no retry can shorten it
    assert not RunnerBreaker.objects.filter(failures__gt=0).exists()
    assert not RunnerBreaker.objects.exclude(state=BreakerState.CLOSED).exists()


def test_signals_are_named_in_the_reason():
    status = runner().launch(spec("/bin/sh", "-c", "kill -TERM $$"))
    assert (status.phase, status.exit_code, status.reason) == (
        Phase.FAILED,
        -signal.SIGTERM,
        "killed by SIGTERM",
    )
