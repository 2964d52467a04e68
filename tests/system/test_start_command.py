"""``./conveyor start`` (``python -m devtools.devserver``) stops whatever it started: every
process of the web and cluster trees, even after a crash loop, and the embedded
PostgreSQL only when it started it."""

from __future__ import annotations

import os
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from devtools import embedded_db
from jobs.models import Worker
from jobs.testing import wait_until
from tests.support.processes import Proc, Processes, free_port

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

READY_SECONDS = 180  # a first start migrates a new database and loads the demo


class StartCommand:
    """One ``python -m devtools.devserver`` and, whatever happens, the end of its tree."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.groups: set[int] = set()

    def start(self, var_dir: Path, *, embedded: bool) -> Proc:
        """The command with its own var dir on a free port, once its admin login answers."""
        port = free_port()
        env = self.processes.env(CONVEYOR_VAR_DIR=str(var_dir), PORT=str(port), JOBS_WORKERS="2")
        if embedded:
            del env["DATABASE_URL"]
        command = self.processes.start("start", ["-m", "devtools.devserver", "--stop-timeout", "5"], env=env)
        wait_until(lambda: self._ready(command, port), READY_SECONDS, "the admin login page")
        assert not command.exited(), command.tail()
        return command

    def _ready(self, command: Proc, port: int) -> bool:
        self._note_groups(command)
        return login_page_answers(port) or command.exited()

    def _note_groups(self, command: Proc) -> None:
        """Each child leads a group of its own, out of reach of the processes fixture."""
        try:
            children = psutil.Process(command.pid).children()
        except psutil.NoSuchProcess:
            return
        for child in children:
            try:
                if os.getpgid(child.pid) == child.pid:
                    self.groups.add(child.pid)
            except ProcessLookupError:
                continue

    def kill_leftovers(self) -> None:
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def start_command(processes: Processes) -> Iterator[StartCommand]:
    command = StartCommand(processes)
    try:
        yield command
    finally:
        command.kill_leftovers()


@pytest.fixture
def var_dir(embedded_var_dir: Path) -> Iterator[Path]:
    """The module's var dir (the first test to start in it migrates its database), with
    no server running in it before and after each test."""
    embedded_db.stop(embedded_var_dir / "pg")
    yield embedded_var_dir
    embedded_db.stop(embedded_var_dir / "pg")


def login_page_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def tree(pid: int) -> dict[int, float]:
    """A process and all its descendants, each with its start time (pids get reused)."""
    root = psutil.Process(pid)
    return {process.pid: process.create_time() for process in [root, *root.children(recursive=True)]}


def still_running(processes: dict[int, float]) -> list[str]:
    left = []
    for pid, started in processes.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(process.cmdline())}")
        except psutil.NoSuchProcess:
            continue
    return left


def in_groups(groups: set[int]) -> list[int]:
    left = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) in groups and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process.pid)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return left


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def engine_worker_pids(url: str, alive_in: dict[int, float]) -> set[int]:
    """The pids of the cluster's engine workers (django-q2 worker processes) now alive."""
    with psycopg.connect(url) as conn:
        pids = {row[0] for row in conn.execute("SELECT pid FROM jobs_worker")}
    return pids & set(alive_in)


def test_stopping_it_after_workers_died_leaves_no_process_and_stops_its_database(start_command, var_dir):
    command = start_command.start(var_dir, embedded=True)
    server = embedded_db.find(var_dir / "pg")
    assert server is not None
    first = wait_until(
        lambda: engine_worker_pids(server.url(), tree(command.pid)), 60, "the engine workers to register"
    )
    for pid in first:
        os.kill(pid, signal.SIGKILL)  # the cluster's sentinel respawns them
    wait_until(
        lambda: len(engine_worker_pids(server.url(), tree(command.pid)) - first) >= len(first),
        60,
        "the cluster to respawn its workers",
    )
    before = tree(command.pid)
    groups = {os.getpgid(pid) for pid in before} - {command.pid}

    command.signal(signal.SIGTERM)
    assert command.wait(60) == 0

    assert still_running(before) == []
    assert in_groups(groups) == []
    assert embedded_db.find(var_dir / "pg") is None


def test_it_leaves_a_database_it_found_running_alone(start_command, var_dir):
    embedded_db.ensure_running(var_dir / "pg")
    server = postmaster_pid(var_dir / "pg")
    command = start_command.start(var_dir, embedded=True)
    before = tree(command.pid)

    command.signal(signal.SIGINT)  # Ctrl-C
    assert command.wait(60) == 0

    assert still_running(before) == []
    assert embedded_db.find(var_dir / "pg") is not None
    assert postmaster_pid(var_dir / "pg") == server


def test_when_a_child_dies_on_its_own_the_other_is_stopped_and_it_exits(start_command, tmp_path):
    command = start_command.start(tmp_path, embedded=False)  # on the test database
    children = psutil.Process(command.pid).children()
    web = next(child for child in children if "project.web" in child.cmdline())
    cluster = next(child for child in children if "qcluster" in child.cmdline())
    wait_until(lambda: Worker.objects.exists(), 60, "the cluster's engine workers")
    before = tree(command.pid)

    web.kill()

    assert command.wait(60) == 1
    assert still_running(before) == []
    assert in_groups({cluster.pid}) == []
    assert not (tmp_path / "pg").exists()  # it started no database of its own
