"""What of a job's error a reader sees: staff get the whole text, members the message.

The worker stores an unexpected exception as ``"Type: message"`` followed by the last
frames of its traceback (``jobs.worker._describe``), and the failure's history event
repeats that text. A traceback names server paths and code: it helps the staff who run
the platform and tells a tenant's members nothing they need, so every surface that
shows a job error or event message to a user (the API, the live streams) passes it
through ``error_text_for``.
"""

from __future__ import annotations

import re
from typing import Any

# Each frame of traceback.format_tb() starts with this line.
_FRAME = re.compile(r'^  File "', re.MULTILINE)


def without_traceback(text: str) -> str:
    """``text`` up to its first traceback frame: the exception's type and message."""
    frame = _FRAME.search(text)
    return text if frame is None else text[: frame.start()].rstrip("\n")


def sees_tracebacks(user: Any) -> bool:
    """Whether ``user`` is shown tracebacks: staff only (no user: nobody)."""
    return bool(getattr(user, "is_staff", False))


def error_text_for(user: Any, text: str) -> str:
    """``text`` as ``user`` may read it: whole for staff, without its traceback else."""
    return text if sees_tracebacks(user) else without_traceback(text)
