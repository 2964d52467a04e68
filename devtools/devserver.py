"""``./conveyor start``: everything a new user needs, in one foreground command.

Migrates, creates an admin login (printed once, when it is created), loads the demos
(``manage.py demo``: a CO2 report, an ingest run, a market-data feed fed by a fake
market-data API that runs alongside, a queued snapshot), then runs the web process
(uvicorn, ASGI: ``python -m project.web``), the django-q2 cluster and an export worker
side by side, each with every process it spawns in a process group of its own. Ctrl-C
(or SIGTERM) stops every group cleanly: the cluster lets running jobs finish, the web
process gives requests in flight up to 10 s, the export worker hands back what it
holds; whatever is still running after ``--stop-timeout`` is terminated, then killed.
When one exits on its own, the others are stopped the same way. The embedded
PostgreSQL, if this command started it, is stopped last, once nothing of theirs is left
to use it.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from devtools import embedded_db, process_groups

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONVEYOR_VAR_DIR", BASE_DIR / "var"))
PYTHON = sys.executable


def _secret_key() -> str:
    """A per-checkout secret kept in var/, so sessions survive restarts."""
    return _kept_secret("secret_key")


def _kept_secret(name: str) -> str:
    path = VAR_DIR / name
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    env.setdefault("DEBUG", "true")
    env.setdefault("SECRET_KEY", _secret_key())
    # The demo feed's fake market-data API listens on 127.0.0.1, which the outbound rules
    # for tenant-supplied URLs refuse unless allowed (set INTAKE_HTTP_ALLOW to override).
    env.setdefault("INTAKE_HTTP_ALLOW", "127.0.0.1")
    # The export worker is a remote worker of the engine; the web process derives its
    # credential from the same token (JOBS_REMOTE_WORKERS "exports").
    env.setdefault("EXPORTS_WORKER_TOKEN", _kept_secret("export_worker_token"))
    _local_hooks_user(env)
    return env


def _local_hooks_user(env: dict[str, str]) -> None:
    """As root, local hooks run as ``INGEST_HOOK_USER`` (``nobody``), who must be able to
    reach this interpreter: the demo's hook is ``python -m ingest.hookkit…``. An
    interpreter behind a private directory (a root's ``~/.pyenv``) cannot be reached, so
    this development server runs local hooks as its own user instead, and says so."""
    if os.geteuid() != 0 or "INGEST_HOOK_USER" in env or _reachable_by_others(Path(PYTHON)):
        return
    env["INGEST_HOOK_USER"] = ""
    print(
        f"Local hooks run as root here: {PYTHON} lies behind a directory other users "
        "cannot enter. Install Python where they can, or set INGEST_HOOK_USER, to run "
        "hooks unprivileged.",
        flush=True,
    )


def _reachable_by_others(path: Path) -> bool:
    """Whether a user who is neither owner nor group member can execute ``path``: every
    directory on the way searchable, the file itself executable, links followed."""
    real = path.resolve()
    try:
        return all(parent.stat().st_mode & 0o001 for parent in real.parents) and bool(
            real.stat().st_mode & 0o001
        )
    except OSError:
        return False


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PYTHON, str(BASE_DIR / "manage.py"), *args], env=env, check=True)


def _ensure_admin(env: dict[str, str]) -> None:
    script = (
        "from django.contrib.auth import get_user_model\n"
        "import os\n"
        "User = get_user_model()\n"
        "if User.objects.filter(username='admin').exists():\n"
        "    print('Admin login: admin (password printed when it was created; '\n"
        "          'reset it with: .venv/bin/python manage.py changepassword admin)')\n"
        "else:\n"
        "    password = os.environ['CONVEYOR_ADMIN_PASSWORD']\n"
        "    User.objects.create_superuser('admin', 'admin@localhost', password)\n"
        "    print(f'Admin login created: admin / {password}  (shown once; keep it)')\n"
    )
    env = {**env, "CONVEYOR_ADMIN_PASSWORD": secrets.token_urlsafe(12)}
    _manage(env, "shell", "-v", "0", "-c", script)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_market_api(env: dict[str, str]) -> tuple[process_groups.Child, str]:
    """The fake market-data API the demo feed calls (``devtools/fakes/market_api.py``):
    on ``MARKET_DEMO_PORT``, or a free port; its URL once it accepts connections."""
    port = int(env.get("MARKET_DEMO_PORT") or _free_port())
    child = process_groups.start(
        "market-api",
        [PYTHON, "-m", "devtools.fakes.market_api", "--host", "127.0.0.1", "--port", str(port)],
        env,
    )
    deadline = time.monotonic() + 15.0
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return child, f"http://127.0.0.1:{port}/"
        except OSError:
            if child.exited() or time.monotonic() > deadline:
                raise RuntimeError(f"the fake market-data API did not start on port {port}") from None
            time.sleep(0.1)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="./conveyor start",
        description=("Migrate, print an admin login, then run the web process and the cluster until Ctrl-C."),
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="On Ctrl-C or SIGTERM, how long running jobs and requests may take to finish "
        "before their processes are terminated (default 60; a second Ctrl-C stops now).",
    )
    return parser.parse_args(argv)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _watch(children: list[process_groups.Child]) -> int:
    """Wait for Ctrl-C (0) or for a child to exit on its own (1)."""
    try:
        while not any(child.exited() for child in children):
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nstopping: running jobs finish first (Ctrl-C again to stop now) …")
        return 0
    for child in children:
        if child.exited():
            print(
                f"{child.name} exited (status {child.popen.returncode}); stopping the others", file=sys.stderr
            )
    return 1


def _hurry_on_signals() -> threading.Event:
    """From here on, Ctrl-C or SIGTERM again hurries the stop along instead of abandoning
    it half-way (children left running, or the database stopped under them)."""
    hurry = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: hurry.set())
    return hurry


def _stop(children: list[process_groups.Child], grace: float, hurry: threading.Event) -> bool:
    """Stop every child's process group; True when nothing was left behind."""
    left = process_groups.stop_all(
        children, grace, hurry=hurry, say=lambda line: print(line, file=sys.stderr)
    )
    if left:
        print(f"could not stop processes {left}", file=sys.stderr)
    return not left


def main(argv: list[str] | None = None) -> int:
    options = _arguments(argv)
    # SIGTERM (a process manager, `timeout`) stops everything as cleanly as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    env = _environment()
    port = env.get("PORT", "8000")
    children: list[process_groups.Child] = []
    status = 0
    try:
        if not env.get("DATABASE_URL"):  # the settings' EMBEDDED_POSTGRES_DIR
            server = embedded_db.ensure_running(VAR_DIR / "pg")
            print(f"Embedded PostgreSQL: {server.data_dir} (socket in {server.socket_dir})")
        _manage(env, "migrate", "--noinput", "-v", "0")
        _ensure_admin(env)
        market_api, market_url = _start_market_api(env)
        children.append(market_api)
        # A filled CO2 report, a source with a finished run, a feed with a week of daily
        # bars (healthy on the board) and a snapshot for the worker below; idempotent.
        # The demo command exists with DEBUG only, whatever the servers run with.
        _manage({**env, "DEBUG": "true"}, "demo", "--api-url", market_url, "--user", "admin")
        host = env.get("HOST", "127.0.0.1")
        children.append(
            process_groups.start("web", [PYTHON, "-m", "project.web", "--host", host, "--port", port], env)
        )
        children.append(
            process_groups.start("cluster", [PYTHON, str(BASE_DIR / "manage.py"), "qcluster"], env)
        )
        children.append(
            process_groups.start(
                "export-worker",
                [
                    PYTHON,
                    str(BASE_DIR / "manage.py"),
                    "export_worker",
                    "--name",
                    "dev-export-worker",
                    "--control-plane",
                    f"http://127.0.0.1:{port}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(_free_port()),
                    "--grace-seconds",
                    "10",
                ],
                env,
            )
        )
        print(f"Conveyor is running: http://127.0.0.1:{port}/admin/  (Ctrl-C stops it)")
        status = _watch(children)
    except KeyboardInterrupt:
        print("\nstopping …")
    finally:
        if not _stop(children, options.stop_timeout, _hurry_on_signals()):
            status = 1
        # Last, and only a server this command started: one it found running is someone
        # else's (another ./conveyor start, a test run), and so are its clients.
        for data_dir in embedded_db.started_by_this_process():
            embedded_db.stop(data_dir)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
