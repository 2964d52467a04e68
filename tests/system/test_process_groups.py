"""Stopping a child stops its whole process group, politely first, by force at the end."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from devtools import process_groups
from jobs.testing import wait_until

pytestmark = pytest.mark.system

# A process that writes down each signal it gets, then (by ``ends_on``) exits or not.
RECORDER = """
import os, signal, sys, time
log, ends_on = sys.argv[1], set(sys.argv[2].split(","))
def note(signum, frame):
    with open(log, "a") as out:
        out.write(signal.Signals(signum).name + "\\n")
    if signal.Signals(signum).name in ends_on:
        os._exit(0)
signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
with open(log, "a") as out:
    out.write("ready\\n")
while True:
    time.sleep(1)
"""

# A leader that starts a recorder (its group's other member) and dies.
DYING_LEADER = """
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
os._exit(1)
"""


@pytest.fixture
def children() -> Iterator[list[process_groups.Child]]:
    started: list[process_groups.Child] = []
    yield started
    for child in started:
        child.signal(signal.SIGKILL)


def recorder(children: list[process_groups.Child], log: Path, ends_on: str) -> process_groups.Child:
    child = process_groups.start("recorder", [sys.executable, "-c", RECORDER, str(log), ends_on], {})
    children.append(child)
    wait_until(lambda: log.exists() and "ready" in log.read_text(), 30, "the recorder to start")
    return child


def received(log: Path) -> list[str]:
    return [line for line in log.read_text().split() if line != "ready"]


def test_a_group_that_stops_on_ctrl_c_gets_only_sigint(children, tmp_path):
    child = recorder(children, tmp_path / "signals", ends_on="SIGINT")
    said: list[str] = []

    assert process_groups.stop_all([child], grace=30, say=said.append) == []

    assert received(tmp_path / "signals") == ["SIGINT"]
    assert said == []


def test_a_group_that_ignores_sigint_and_sigterm_is_killed(children, tmp_path):
    child = recorder(children, tmp_path / "signals", ends_on="")
    said: list[str] = []

    left = process_groups.stop_all([child], grace=0.2, terminate_grace=0.2, say=said.append)

    assert left == [] and child.members() == []
    assert received(tmp_path / "signals") == ["SIGINT", "SIGTERM"]
    assert said == ["recorder: still running; sending SIGTERM", "recorder: still running; sending SIGKILL"]


def test_the_orphans_of_a_dead_leader_are_stopped_without_waiting_for_a_polite_exit(children, tmp_path):
    log = tmp_path / "signals"
    leader = process_groups.start(
        "cluster", [sys.executable, "-c", DYING_LEADER, RECORDER, str(log), "SIGTERM"], {}
    )
    children.append(leader)
    wait_until(lambda: log.exists() and "ready" in log.read_text(), 30, "the orphan to start")
    wait_until(leader.exited, 30, "the leader to die")
    orphans = leader.members()
    assert len(orphans) == 1 and psutil.Process(orphans[0]).ppid() != leader.pgid

    # Nobody would act on a polite request: the orphan is not sent one (it would be noted).
    assert process_groups.stop_all([leader], grace=5, say=lambda line: None) == []

    assert received(log) == ["SIGTERM"]
    assert leader.members() == []
