"""The supervising parent of one local hook: whatever ends it, the hook's whole tree ends.

A worker that waited on its hook directly could not keep that promise: a parent-death
signal reaches only the process it is set on, so a SIGKILLed worker took its hook's
first process with it and left behind whatever that process had started (a shell's
background jobs, a double fork, a ``setsid``), running beside the rescued copy of the
same batch. The worker therefore starts this program (``python -I -S``: the standard
library alone, none of the project, so it starts in milliseconds), and this program:

- dies with the worker: its parent-death signal is SIGTERM, which it catches; a worker
  already gone before that was set is seen by the parent's pid, and nothing starts;
- is a child subreaper (``PR_SET_CHILD_SUBREAPER``): every descendant of the hook that
  loses its parent is reparented to it, however it got away, so it can find them all;
- starts the hook as the runner would have: the environment built for it, the hook
  user (when this is root), its rlimits, a session of its own, the scratch directory as
  its working directory, its output into the file the worker passed (``plan["output"]``,
  a descriptor), SIGKILL as its own parent-death signal;
- enforces the hook's time limit, and when the hook exits, the limit passes, the worker
  dies or the worker sends SIGTERM, kills the hook's process group and then each of its
  remaining children, round after round, until it has none (within
  ``CLEANUP_SECONDS``);
- reports the outcome on its stdout and exits.

Its start is paid on every launch, so it imports only modules that are built into the
interpreter or small: ``posix`` and ``_signal`` rather than ``os`` and ``signal`` (which
bring ``enum``, ``functools`` and ``collections``: 8 ms here), ``_ctypes`` rather than
``ctypes`` for ``prctl`` (4 ms).

The worker writes the plan on stdin as one ``marshal`` value (builtin: no import to pay
for; the worker is the only writer) and reads one JSON line back, written here by hand
from numbers and fixed words: ``{"outcome": "exit", "code": N}`` (a negative code is the
signal that killed the hook), ``{"outcome": "deadline"}``, ``{"outcome": "stopped",
"signal": N}``, ``{"outcome": "failed", "stage": S, "errno": N}`` for a hook that could not
start, each with ``"left"``: the processes still there when cleanup gave up (0 normally).
Its own stderr is the worker's: an error of this program is the operators' to read, not
the tenant's, whose hook output is a file of its own.
"""

# Standard library only: this runs with -I -S, without the project or site-packages.
import _ctypes
import _signal as signal
import errno
import marshal
import posix as os
import resource
import sys
import time

# prctl(2) options (linux/prctl.h).
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
# The plan is the command, the environment and a few numbers.
PLAN_MAX_BYTES = 16 * 1024 * 1024
# How long killing the hook's tree may take before this process gives up and reports
# what is left (an uninterruptible sleep on a dead mount cannot be hurried).
CLEANUP_SECONDS = 5.0
# Between two rounds of the cleanup: long enough for SIGKILLed processes to be reaped.
CLEANUP_ROUND_SECONDS = 0.02
# What ends the wait: a child changed state, the worker's SIGTERM (or its death),
# Ctrl-C or a hang-up of a terminal it was started from.
WATCHED = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Exec and the steps before it, as reported (the worker sorts the errno of each).
STAGES = ("fork", "chdir", "user", "confine", "exec")


def main() -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)  # taken by sigtimedwait, never lost
    prctl = _prctl()
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    prctl(PR_SET_DUMPABLE, 0)  # a hook of the same user cannot trace it
    plan = marshal.loads(_read_all(0, PLAN_MAX_BYTES))
    if os.getppid() != plan["parent"]:
        return 0  # the worker died before the parent-death signal was set: start nothing
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    _report(supervise(plan, prctl))
    return 0


def supervise(plan: dict, prctl) -> dict:
    """Start the hook, wait for its end, its time limit or a stop, kill its tree; the
    outcome."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    me = os.getpid()
    try:
        hook = os.fork()
    except OSError as exc:
        return {"outcome": "failed", "stage": "fork", "errno": exc.errno or 0, "left": 0}
    if hook == 0:
        os.close(read_end)
        _run_hook(plan, me, write_end, prctl)  # never returns
    os.close(write_end)
    failure = _read_all(read_end, 64)
    os.close(read_end)
    if failure:  # the hook's process reported why it could not exec, and exited
        stage, number = failure.decode().split(":")
        outcome = {"outcome": "failed", "stage": stage, "errno": int(number)}
    else:
        outcome = wait(hook, time.monotonic() + plan["timeout"])
    outcome["left"] = kill_tree(hook, time.monotonic() + CLEANUP_SECONDS)
    return outcome


def wait(hook: int, deadline: float) -> dict:
    """Until the hook exits (left unreaped, so its pid and group id stay its own until
    the cleanup), the deadline passes or a signal says stop."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return {"outcome": "deadline"}
        received = signal.sigtimedwait(WATCHED, left)
        if received is None:
            continue
        if received.si_signo != signal.SIGCHLD:
            return {"outcome": "stopped", "signal": received.si_signo}
        ended = os.waitid(os.P_PID, hook, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if ended is not None:
            return {"outcome": "exit", "code": exit_code(ended.si_code, ended.si_status)}
        _reap_orphans(hook)


def exit_code(si_code: int, si_status: int) -> int:
    """``waitid``'s answer as ``subprocess`` gives it: the exit status, or minus the signal."""
    return si_status if si_code == os.CLD_EXITED else -si_status


def kill_tree(hook: int, deadline: float) -> int:
    """SIGKILL the hook's process group, then every child this process still has (the
    hook, and every orphan of its tree reparented here), round after round until none is
    left or the deadline passes; how many were left."""
    try:
        os.killpg(hook, signal.SIGKILL)  # its pid is unreaped: the group is still the hook's
    except (ProcessLookupError, PermissionError):
        pass
    while True:
        children = _children()
        for pid in children:
            for kill in (os.kill, os.killpg):  # a child that started a group: all of it
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return 0  # no child at all: every process of the tree is gone
        if time.monotonic() >= deadline:
            return max(1, len(_children()))
        signal.sigtimedwait((signal.SIGCHLD,), CLEANUP_ROUND_SECONDS)


def _reap_orphans(hook: int) -> None:
    """Reap the orphans of the hook's tree that have exited, so that they do not pile
    up as zombies while the hook runs; the hook itself is left for the cleanup."""
    for pid in _children():
        if pid != hook:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _children() -> list[int]:
    """This process's children, running or exited."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as listing:
            return [int(pid) for pid in listing.read().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: every process's parent
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as stat:
                        if int(stat.read().rsplit(b")", 1)[1].split()[1]) == me:
                            found.append(int(name))
                except (OSError, IndexError, ValueError):
                    pass
        return found


def _run_hook(plan: dict, supervisor: int, failures: int, prctl) -> None:
    """In the forked child: confine it and exec the hook; on failure, write
    ``stage:errno`` to ``failures`` and exit."""
    stage = "confine"
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        for ignored in (signal.SIGPIPE, signal.SIGXFSZ):  # Python's; the hook gets the defaults
            signal.signal(ignored, signal.SIG_DFL)
        os.setsid()
        stage = "chdir"
        os.chdir(plan["cwd"])
        stage = "confine"
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(plan["output"], 1)  # the report pipe and the worker's stderr: not the hook's
        os.dup2(plan["output"], 2)
        os.close(null)
        if plan["user"] is not None:
            stage = "user"
            uid, gid = plan["user"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        stage = "confine"
        for kind, soft, hard in plan["rlimits"]:
            resource.setrlimit(kind, (soft, hard))
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != supervisor:  # the supervisor died before the line above
            os._exit(127)
        os.closerange(3, failures)
        os.closerange(failures + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        stage = "exec"
        _execute(plan["command"], plan["env"])
    except OSError as exc:
        os.write(failures, f"{stage}:{exc.errno or 0}".encode())
    except BaseException:  # a limit out of range (ValueError), anything else: the spec's
        os.write(failures, f"{stage}:0".encode())
    os._exit(127)


def _execute(command: list[str], env: dict[str, str]) -> None:
    """exec ``command``, found on the environment's PATH as ``subprocess`` finds it: the
    first error that is not "no such file" is the one raised."""
    name = command[0]
    if "/" in name:
        os.execve(name, command, env)
    found: OSError | None = None
    last: OSError | None = None
    for folder in env.get("PATH", "/bin:/usr/bin").split(":"):
        try:
            os.execve(f"{folder or '.'}/{name}", command, env)
        except OSError as exc:
            last = exc
            if found is None and exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                found = exc
    raise found or last or OSError(errno.ENOENT, os.strerror(errno.ENOENT))


def _read_all(fd: int, bound: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
        if len(data) > bound:
            raise ValueError(f"more than {bound} bytes on fd {fd}")
    return data


def report_line(outcome: dict) -> bytes:
    """The outcome as one JSON line, of numbers and fixed words (no json module to import)."""
    fields = ", ".join(
        f'"{key}": ' + (f'"{value}"' if isinstance(value, str) else str(int(value)))
        for key, value in outcome.items()
    )
    return ("{" + fields + "}\n").encode()


def _report(outcome: dict) -> None:
    try:
        os.write(1, report_line(outcome))
    except OSError:  # the worker is gone: nobody to tell
        pass


class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _ULong(_ctypes._SimpleCData):
    _type_ = "L"


class _Function(_ctypes.CFuncPtr):
    """``int f(int, unsigned long ×4)`` of the C library, setting ``errno``: ``prctl``."""

    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int
    _argtypes_ = (_Int, _ULong, _ULong, _ULong, _ULong)


class _Libc:
    _handle = None


def _prctl():
    """``prctl(option, value)``, raising ``OSError``; through ``_ctypes``, as ``ctypes``
    itself calls it."""
    if _Libc._handle is None:
        _Libc._handle = _ctypes.dlopen(None)
    call = _Function(("prctl", _Libc()))

    def prctl(option: int, value: int) -> None:
        if call(option, value, 0, 0, 0) != 0:
            code = _ctypes.get_errno()
            raise OSError(code, f"prctl({option}): {os.strerror(code)}")

    return prctl


if __name__ == "__main__":
    sys.exit(main())
