"""An export worker as a real process (``manage.py export_worker``), for system tests."""

from __future__ import annotations

from typing import Any

from tests.support.processes import Proc, Processes


def start_export_worker(
    processes: Processes,
    control_plane_url: str,
    name: str,
    env: dict[str, str],
    *,
    grace: float | None = None,
) -> Any:
    """Start a worker named ``name`` with ``env`` against the control plane, passing every
    0.1 s; once it says where its probes listen (``proc.probes``, the port)."""
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
