"""The export worker's probes on their own port: ``GET /health`` (200 while its loop has
run within the last few passes) and ``GET /ready`` (200 while it is not stopping and the
control plane answered its last pass). Anything else is 404; a request that does not
arrive within 5 s, or is longer than 8 KB, is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exports.worker import ExportWorker

READ_SECONDS = 5.0
MAX_HEAD = 8192


def _status(worker: ExportWorker, path: str) -> tuple[int, str]:
    if path == "/health":
        quiet = time.monotonic() - worker.last_pass
        limit = 3 * max(worker.settings.idle_seconds, worker.settings.pass_seconds) + 60
        return (200, "alive") if quiet < limit else (503, f"no pass for {quiet:.0f} s")
    if path == "/ready":
        if worker.stopping.is_set():
            return 503, "stopping"
        return (200, "ready") if worker.control_plane_ok else (503, "control plane unreachable")
    return 404, "not found"


async def serve(worker: ExportWorker, host: str, port: int) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_SECONDS)
            parts = head[:MAX_HEAD].split(b" ", 2)
            path = parts[1].decode("latin-1").split("?", 1)[0] if len(parts) > 2 else ""
            code, text = _status(worker, path) if parts[0] == b"GET" else (405, "GET only")
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        body = (text + "\n").encode()
        writer.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (code, b"OK" if code == 200 else b"Error", len(body), body)
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, host, port, limit=MAX_HEAD)
