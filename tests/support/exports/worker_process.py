"""An export worker as a real process (``manage.py export_worker``), for system tests.

The control plane is the test's live server (in the test's process: the engine's clock
is the test's, and the test drives the reaper and the reconciliation itself); the
worker reaches it only through the remote workers' API, with the token of the
``exports`` credential, and is given a database URL that goes nowhere, so that any use
of Conveyor's database would fail it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings

from tests.support.processes import Proc, Processes

NO_DATABASE = "postgresql://nobody@127.0.0.1:1/nowhere"


def serve_export_workers(settings: Any, token: str) -> None:
    """What the web process's settings make of ``EXPORTS_WORKER_TOKEN``, for the live
    server: the credential ``exports``, serving the exports queue, with ``token``."""
    settings.EXPORTS_WORKER_TOKEN = token
    settings.JOBS_REMOTE_WORKERS = {"exports": {"token": token, "queues": ["exports"]}}


def worker_env(processes: Processes, token: str, **extra: str) -> dict[str, str]:
    """A worker's environment: no database of Conveyor's, the export root of the control
    plane (a job's files go only under it), the credential's token, and ``extra``."""
    return processes.env(
        DATABASE_URL=NO_DATABASE,
        EXPORTS_STORAGE_URL=str(django_settings.EXPORTS_STORAGE_URL),
        EXPORTS_WORKER_TOKEN=token,
        **extra,
    )


def start_export_worker(
    processes: Processes,
    control_plane_url: str,
    name: str,
    env: dict[str, str],
    *,
    grace: float | None = None,
) -> Any:
    """Start a worker named ``name`` with ``env`` against the control plane, passing every
    0.1 s; once it says where its probes listen (``proc.probes``, the port). Its jobs
    are the engine's under ``exports/<name>``."""
    options = ["--grace-seconds", str(grace)] if grace is not None else []
    proc: Proc = processes.manage(
        name,
        "export_worker",
        "--control-plane",
        control_plane_url,
        "--name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--pass-seconds",
        "0.1",
        "--idle-seconds",
        "0.1",
        *options,
        env=env,
        stdout_pipe=True,
    )
    line = proc.read_line(30)
    assert "probes on 127.0.0.1:" in line, proc.tail()
    proc.probes = int(line.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    return proc
