"""A hook's processes, every one it started included, found by a token in their argument
list or their environment (``/proc``), and hooks that leave processes behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has died; its parent reaps it


def marked(token: str) -> list[int]:
    """The live processes whose argv or environment holds ``token``."""
    needle = token.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            seen = any(needle in Path(f"/proc/{name}/{part}").read_bytes() for part in ("cmdline", "environ"))
        except OSError:  # gone, or not ours to read
            continue
        if seen and alive(int(name)):
            found.append(int(name))
    return found


def kill_marked(token: str) -> None:
    """What a test leaves behind when the runner under test did not clean up."""
    for pid in marked(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def leaving_processes(token: str, then: str = "exit 0") -> tuple[str, ...]:
    """A shell hook that starts a background ``sleep``, one in a session of its own
    (``setsid``) and one double-forked away from it, each carrying ``token`` in its
    environment, then runs ``then``."""
    return (
        "/bin/sh",
        "-c",
        f"export HOOK_MARK={token}; sleep 600 & setsid sleep 600 & (sleep 600 &); {then}",
    )
