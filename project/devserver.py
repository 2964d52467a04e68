"""``./conveyor start``: everything a new user needs, in one foreground command.

Migrates, creates an admin login (printed once, when it is created), then runs the web
process (uvicorn, ASGI: ``python -m project.web``) and the django-q2 cluster side by
side. Ctrl-C (or SIGTERM) stops both cleanly: the cluster lets running jobs finish, the
web process gives requests in flight up to 10 s. The embedded PostgreSQL, if this
command started it, is stopped last.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONVEYOR_VAR_DIR", BASE_DIR / "var"))
PYTHON = sys.executable


def _secret_key() -> str:
    """A per-checkout secret kept in var/, so sessions survive restarts."""
    path = VAR_DIR / "secret_key"
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
    return env


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


def _stop(processes: list[subprocess.Popen[bytes]], grace: float = 60.0) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    # SIGTERM (a process manager, `timeout`) stops everything as cleanly as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    env = _environment()
    sys.path.insert(0, str(BASE_DIR))
    from project import embedded_db

    server = None
    if not env.get("DATABASE_URL"):
        server = embedded_db.ensure_running(VAR_DIR / "pg")
        print(f"Embedded PostgreSQL: {server.data_dir} (socket in {server.socket_dir})")
    port = env.get("PORT", "8000")
    try:
        _manage(env, "migrate", "--noinput", "-v", "0")
        _ensure_admin(env)
        _manage(env, "load_demo", "--user", "admin")  # a filled CO2 report (idempotent)
        web = subprocess.Popen(
            [PYTHON, "-m", "project.web", "--host", env.get("HOST", "127.0.0.1"), "--port", port],
            env=env, start_new_session=True)
        # Own sessions: Ctrl-C reaches only this script, which stops each child once.
        cluster = subprocess.Popen([PYTHON, str(BASE_DIR / "manage.py"), "qcluster"], env=env,
                                   start_new_session=True)
        print(f"Conveyor is running: http://127.0.0.1:{port}/admin/  (Ctrl-C stops it)")
        processes = [web, cluster]
        try:
            while all(p.poll() is None for p in processes):
                time.sleep(0.5)
            print("a Conveyor process exited; stopping the others", file=sys.stderr)
        except KeyboardInterrupt:
            print("\nstopping: running jobs finish first …")
        _stop(processes)
    finally:
        if server is not None and server.started_here:
            embedded_db.stop(server.data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
