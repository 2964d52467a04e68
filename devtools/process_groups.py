"""Children that are stopped with everything they spawned.

A child started here leads a session and process group of its own, so a Ctrl-C in the
terminal reaches only the command that started it, and its group holds every process it
spawns: django-q2's sentinel, worker, monitor and pusher processes, uvicorn's workers.
The group outlives its leader (the rest is reparented to init but keeps the group id),
so stopping a child means stopping its group, never just the leader: a leader killed
alone leaves workers behind that keep running against a database about to stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

# After the polite request: the processes' own quick exit, then no choice.
TERMINATE_SECONDS = 10.0
KILL_SECONDS = 5.0
POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Child:
    """One started command and the process group it leads."""

    name: str
    popen: subprocess.Popen[bytes]

    @property
    def pgid(self) -> int:
        return self.popen.pid  # a session leader's group id is its pid

    def exited(self) -> bool:
        """Whether the leader has exited (and is reaped); its group may live on."""
        return self.popen.poll() is not None

    def members(self) -> list[int]:
        """The live processes of the group, the leader's descendants included."""
        self.exited()  # reap the leader: a zombie is not a live process
        return group_members(self.pgid)

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            pass  # the whole group is gone


def start(name: str, args: Sequence[str], env: Mapping[str, str]) -> Child:
    """Run ``args`` as the leader of a new session (and so of a new process group)."""
    return Child(name, subprocess.Popen(list(args), env=dict(env), start_new_session=True))


def group_members(pgid: int) -> list[int]:
    """The pids of the live processes in group ``pgid`` (zombies have already exited)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # exited while we looked, or not ours to see
    return members


def stop_all(
    children: Sequence[Child],
    grace: float,
    *,
    hurry: threading.Event | None = None,
    say: Callable[[str], object] = print,
    terminate_grace: float = TERMINATE_SECONDS,
) -> list[int]:
    """Stop every child's whole process group; return the pids that survived SIGKILL.

    First SIGINT, what Ctrl-C in a terminal sends to a foreground group: the programs are
    built for it (uvicorn finishes requests in flight; django-q2's main process stops its
    cluster so that running jobs finish, and the cluster's other processes ignore it).
    Then, for groups still alive after ``grace`` seconds, SIGTERM, and after
    ``terminate_grace`` more, SIGKILL. A group whose leader is already dead has nobody
    left to stop it politely and starts at SIGTERM. Setting ``hurry`` (a second Ctrl-C)
    moves on to the next signal at once.
    """
    hurry = hurry or threading.Event()
    steps = [(signal.SIGINT, grace), (signal.SIGTERM, terminate_grace), (signal.SIGKILL, KILL_SECONDS)]
    for signum, bound in steps:
        alive = [child for child in children if child.members()]
        if not alive:
            return []
        if signum != signal.SIGINT:
            names = ", ".join(child.name for child in alive)
            say(f"{names}: still running; sending {signal.Signals(signum).name}")
        for child in alive:
            leaderless = signum == signal.SIGINT and child.exited()
            child.signal(signal.SIGTERM if leaderless else signum)
        hurry.clear()
        _wait_until_gone(alive, bound, hurry)
    return [pid for child in children for pid in child.members()]


def _wait_until_gone(children: Sequence[Child], bound: float, hurry: threading.Event) -> None:
    deadline = time.monotonic() + bound
    while any(child.members() for child in children):
        if time.monotonic() >= deadline or hurry.wait(POLL_SECONDS):
            return
