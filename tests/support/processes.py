"""Real OS processes against the test database: starting, watching and always killing them.
A pytest plugin (``tests/conftest.py``): its fixtures (``processes``, ``embedded_var_dir``,
``private_postgres``, ``private_database``) serve every test directory.

Subprocesses reach the test database through a ``DATABASE_URL`` built from this
process's connection, and run with ``project.test_settings`` so that they know the
test job types. Each starts in its own session; teardown SIGKILLs the whole process
group (a qcluster's sentinel and workers too), whatever the test's outcome.

Tests that take the database away (stop it, restart it) run on a PostgreSQL server of
their own (``private_database``), never on the one other test runs share.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from devtools import embedded_db
from jobs.testing import wait_until

T = TypeVar("T")
ROOT = Path(settings.BASE_DIR)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def database_url() -> str:
    """The test database as a libpq URL (a socket directory host is percent-encoded)."""
    db = connection.settings_dict
    auth = quote(db["USER"] or "", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = quote(db.get("HOST") or "", safe="")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{quote(db['NAME'], safe='')}"


class Proc:
    """One started process with its combined log file."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.name, self.popen, self.log = name, popen, log
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def exited(self) -> bool:
        return self.popen.poll() is not None

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout:g}s\n{self.tail()}") from None

    def read_line(self, timeout: float) -> str:
        """The next line of the process's stdout (which must be a pipe)."""
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"no output from {self.name} in {timeout:g}s\n{self.tail()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"{self.name} closed its output\n{self.tail()}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            text = []
        return f"--- {self.name} (pid {self.pid}) log tail ---\n" + "\n".join(text)


class Processes:
    """Starts subprocesses for one test and kills every one of them at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Proc] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("JOBS_")}
        env.update(
            DATABASE_URL=database_url(),
            DJANGO_SETTINGS_MODULE="project.test_settings",
            CONVEYOR_ALLOW_DEV_SECRET="1",
            PYTHONUNBUFFERED="1",
        )
        # Staged uploads are found by id under the staging root, so every process of a
        # test must share the test's own one.
        staging_url = getattr(settings, "INTAKE_STAGING_URL", None)
        if staging_url:
            env["INTAKE_STAGING_URL"] = str(staging_url)
        env.update(extra)
        return env

    def start(
        self, name: str, args: list[str], *, env: dict[str, str] | None = None, stdout_pipe: bool = False
    ) -> Proc:
        log = self.logs / f"{name}.log"
        with log.open("wb") as sink:
            popen = subprocess.Popen(
                [sys.executable, *args],
                cwd=ROOT,
                env=env or self.env(),
                stdout=subprocess.PIPE if stdout_pipe else sink,
                stderr=sink,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = Proc(name, popen, log)
        self.started.append(proc)
        return proc

    def manage(self, name: str, *args: str, **kwargs: Any) -> Proc:
        return self.start(name, ["manage.py", *args], **kwargs)

    def web(self, env: dict[str, str] | None = None) -> tuple[Proc, int]:
        """The web process (``python -m project.web``) on a free port, once it listens."""
        port = free_port()
        web = self.start("web", ["-m", "project.web", "--host", "127.0.0.1", "--port", str(port)], env=env)
        wait_until(lambda: listening(port) or web.exited(), 30, "the web process to listen")
        assert not web.exited(), web.tail()
        return web, port

    def kill_all(self) -> None:
        for proc in self.started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the process and all it spawned
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
            if proc.popen.stdout is not None:
                proc.popen.stdout.close()

    def tails(self) -> str:
        return "\n".join(proc.tail() for proc in self.started)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs)
    try:
        yield procs
    finally:
        procs.kill_all()
        print(procs.tails())  # shown by pytest only when the test failed


@pytest.fixture(scope="module")
def embedded_var_dir() -> Iterator[Path]:
    """A var dir for an embedded PostgreSQL of the tests' own, with no server running in
    it after each module. Outside pytest's temporary directory: as root, pgserver runs the
    server as a user of its own that must enter every parent of its data directory, and
    every new pytest session on the machine makes that directory private again."""
    path = Path(tempfile.mkdtemp(prefix="conveyor-var-"))
    try:
        yield path
    finally:
        embedded_db.stop(path / "pg")
        shutil.rmtree(path, ignore_errors=True)


# --- a PostgreSQL server to take away ---------------------------------------------------------

TEMPLATE_DB = "conveyor_template"


@dataclass(frozen=True)
class PrivatePostgres:
    """The session's own PostgreSQL (``pgserver``), which a test may stop and restart."""

    server: embedded_db.EmbeddedServer

    def stop(self, mode: str = "fast") -> None:
        embedded_db.stop(self.server.data_dir, mode)

    def start(self) -> None:
        embedded_db.start(self.server)

    def restart(self, mode: str = "fast") -> None:
        embedded_db.restart(self.server.data_dir, mode)

    def execute(self, sql: str, database: str = "postgres") -> None:
        with psycopg.connect(self.server.url(database), autocommit=True) as conn:
            conn.execute(sql)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server for this session alone, with a migrated template database
    (and the ``tests_hits`` table) that each test copies.

    Its data directory is not under pytest's temporary root: as root, pgserver runs the
    server as another user, who must traverse every parent folder, and each pytest run
    on this machine makes that root private again."""
    data_dir = Path(tempfile.mkdtemp(prefix="conveyor-private-pg-")) / "pg"
    private = PrivatePostgres(embedded_db.ensure_running(data_dir))
    try:
        private.execute(f"CREATE DATABASE {TEMPLATE_DB}")
        env = {
            **os.environ,
            "DATABASE_URL": private.server.url(TEMPLATE_DB),
            "DJANGO_SETTINGS_MODULE": "project.test_settings",
            "CONVEYOR_ALLOW_DEV_SECRET": "1",
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=300
        )
        private.execute(
            "CREATE TABLE tests_hits (job_id bigint PRIMARY KEY, worker_pid integer NOT NULL)", TEMPLATE_DB
        )
        yield private
    finally:
        embedded_db.stop(data_dir, "immediate")
        shutil.rmtree(data_dir.parent, ignore_errors=True)


@pytest.fixture
def private_database(private_postgres: PrivatePostgres, transactional_db: None) -> Iterator[PrivatePostgres]:
    """Point this test, and the processes it starts, at a fresh copy of the template on
    the private server; the test may stop or restart that server.

    The test's default connection is re-aimed the way Django's test runner aims it at the
    test database (its ``settings_dict``), and aimed back before pytest-django's teardown.
    """
    name = f"faults_{uuid.uuid4().hex[:12]}"
    private_postgres.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    connection.close()
    saved = dict(connection.settings_dict)
    connection.settings_dict.update(
        NAME=name, HOST=private_postgres.server.socket_dir, PORT="", USER="postgres", PASSWORD=""
    )
    try:
        yield private_postgres
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        private_postgres.start()  # for the next test, whatever this one left


def log_lines(proc: Proc, text: str) -> list[str]:
    """The lines of ``proc``'s log that contain ``text``."""
    try:
        return [line for line in proc.log.read_text(errors="replace").splitlines() if text in line]
    except FileNotFoundError:
        return []
