"""A real HTTP server on localhost for the sources at the edge of the world (the unit
directory, API ingest): it answers each path with a status and a body, optionally
after a delay, and records the requests it got."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    content_type: str = "application/json"


class SourceServer:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.hits.append(self.path)
                route = server.routes.get(self.path, Route(404, b'{"error": "not found"}'))
                time.sleep(route.delay)
                try:
                    self.send_response(route.status)
                    self.send_header("Content-Type", route.content_type)
                    self.send_header("Content-Length", str(len(route.body)))
                    self.end_headers()
                    self.wfile.write(route.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}{path}"

    def json(self, path: str, document: Any, status: int = 200) -> str:
        self.routes[path] = Route(status, json.dumps(document).encode())
        return self.url(path)

    def raw(self, path: str, body: bytes, status: int = 200, delay: float = 0.0) -> str:
        self.routes[path] = Route(status, body, delay)
        return self.url(path)

    def __enter__(self) -> SourceServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
