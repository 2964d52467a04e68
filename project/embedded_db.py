"""The private PostgreSQL that Conveyor starts when ``DATABASE_URL`` is unset.

The server comes from the ``pgserver`` wheel (PostgreSQL 16 binaries, unix socket only,
trust auth). It is shared by every process of one checkout and outlives them all: the
first process starts it, the others find it through ``postmaster.pid``, and the command
that started it stops it (``./conveyor start`` when it exits, a test run at its end);
a command that found it running leaves it to whoever started it. ``pgserver`` is an
optional dependency kept behind this one module so that it can be swapped out;
production always sets ``DATABASE_URL``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EmbeddedServer:
    data_dir: Path
    socket_dir: str
    started_here: bool

    def url(self, database: str = "postgres") -> str:
        """A libpq URL for ``database`` on this server (socket path percent-encoded)."""
        return f"postgresql://postgres@{self.socket_dir.replace('/', '%2F')}/{database}"


# The data directories whose server this process started (for the test run's end).
_started: list[Path] = []


def _running_socket_dir(data_dir: Path) -> str | None:
    """The socket directory of a live, ready server in ``data_dir``, or None."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 8 or lines[7].strip() != "ready":
        return None
    try:
        os.kill(int(lines[0]), 0)
    except (ProcessLookupError, ValueError):
        return None
    except PermissionError:
        pass  # alive, owned by another user (pgserver runs it as "pgserver" under root)
    return lines[4].strip() or None


def find(data_dir: Path) -> EmbeddedServer | None:
    """The server running in ``data_dir``, or None."""
    data_dir = data_dir.resolve()
    socket_dir = _running_socket_dir(data_dir)
    return EmbeddedServer(data_dir, socket_dir, started_here=False) if socket_dir else None


def ensure_running(data_dir: Path) -> EmbeddedServer:
    """Start the server in ``data_dir`` unless it already runs, and say where it listens."""
    data_dir = data_dir.resolve()
    running = find(data_dir)
    if running:
        return running
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - depends on the install
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "DATABASE_URL is unset and the embedded PostgreSQL is not installed: "
            "pip install 'conveyor[embedded]' or set DATABASE_URL."
        ) from exc
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server must outlive this process (a SIGKILLed worker would
    # otherwise take it down for everyone, or leave it half-stopped).
    pgserver.get_server(data_dir, cleanup_mode=None)
    socket_dir = _running_socket_dir(data_dir)
    if not socket_dir:
        raise RuntimeError(f"embedded PostgreSQL in {data_dir} did not become ready")
    _started.append(data_dir)
    return EmbeddedServer(data_dir, socket_dir, started_here=True)


def stop(data_dir: Path, mode: str = "fast") -> bool:
    """Stop the server in ``data_dir`` if it runs; True when one was stopped. ``mode`` is
    pg_ctl's: ``fast`` ends the sessions and shuts down cleanly, ``immediate`` kills the
    server outright (it recovers from its WAL on the next start, as after a crash)."""
    data_dir = data_dir.resolve()
    if not _running_socket_dir(data_dir):
        return False
    _pg_ctl(data_dir, "-m", mode, "-w", "stop")
    return True


def start(server: EmbeddedServer) -> None:
    """Start ``server`` again after ``stop``, listening where it did (``ensure_running``
    would not: pgserver remembers, per process, a server it started as running)."""
    if _running_socket_dir(server.data_dir):
        return
    _pg_ctl(server.data_dir, "-w", "-o", '-h ""', "-o", f"-k {server.socket_dir}",
            "-l", str(server.data_dir / "log"), "start")


def restart(data_dir: Path, mode: str = "fast") -> None:
    """Restart the running server in ``data_dir`` (``mode`` as for ``stop``), with the
    options it was started with; returns once it accepts connections again."""
    data_dir = data_dir.resolve()
    _pg_ctl(data_dir, "-m", mode, "-w", "-l", str(data_dir / "log"), "restart")


def _pg_ctl(data_dir: Path, *args: str) -> None:
    import pgserver

    # As root, pgserver runs the server as its own system user; pg_ctl must too.
    user = "pgserver" if os.geteuid() == 0 else None
    pgserver.pg_ctl(list(args), pgdata=data_dir, user=user)


def started_by_this_process() -> list[Path]:
    """The data directories whose server this process started (running or not by now)."""
    return list(_started)
