"""Loaded into the cluster processes of ``bench/scale.py`` (``JOBS_HANDLER_MODULES``):
every claim's time, asked and taken counts, written to a file per process.

django-q2's worker processes end with ``os._exit``, which runs no exit handler, so the
file is rewritten at most every half second as claims happen (an idle worker claims once
a second, which writes the last of it).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from jobs import engine

_claim = engine.claim
_records: list[tuple[float, int, int]] = []
_lock = threading.Lock()
_written = 0.0


def _logged_claim(worker: str, *, limit: int, **options):
    global _written
    batch = _claim(worker, limit=limit, **options)
    now = time.time()
    with _lock:
        _records.append((now, limit, len(batch.jobs)))
        if now - _written >= 0.5:
            _written = now
            folder = Path(os.environ["BENCH_CLAIM_LOG_DIR"])
            (folder / f"{os.getpid()}.json").write_text(json.dumps(_records))
    return batch


if os.environ.get("BENCH_CLAIM_LOG_DIR"):
    engine.claim = _logged_claim
