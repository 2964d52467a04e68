"""The start signal of a benchmark job: one UDP datagram to the bench process.

Each system's no-op job, when its payload carries a probe id, sends ``"<id> <time>"``
the moment its handler starts. The bench subtracts the time it called enqueue: that is
enqueue-to-start latency, measured the same way for every system and without touching
the database under test. Without ``BENCH_PROBE_PORT`` (or a probe id) it does nothing.
"""

from __future__ import annotations

import os
import socket
import time

_sock: socket.socket | None = None


def started(probe: str | None) -> None:
    global _sock
    port = os.environ.get("BENCH_PROBE_PORT")
    if probe is None or not port:
        return
    now = time.time()
    if _sock is None:
        _sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _sock.sendto(f"{probe} {now:.6f}".encode(), ("127.0.0.1", int(port)))
