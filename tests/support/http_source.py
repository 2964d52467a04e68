"""A real HTTP server on a loopback address for the sources at the edge of the world (the
unit directory, API ingest): it answers each path with a status, headers and a body,
optionally after a delay or a byte at a time, and records the requests it got. Given a
server-side TLS context it speaks HTTPS. A path without an exact route may be answered by
a function of its query (``answer``), for paged APIs."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    trickle: float = 0.0  # seconds between the body's bytes (0: all at once)
    sized: bool = True  # False: no Content-Length, the body ends when the connection does


class SourceServer:
    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.answers: dict[str, Callable[[dict[str, str]], Route]] = {}
        self.hits: list[str] = []
        self.host = host
        self.scheme = "https" if tls else "http"
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.hits.append(self.path)
                route = server.routes.get(self.path) or server.answer_to(self.path)
                time.sleep(route.delay)
                try:
                    self.send_response(route.status)
                    self.send_header("Content-Type", route.content_type)
                    if route.sized:
                        self.send_header("Content-Length", str(len(route.body)))
                    for name, value in route.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self._write(route)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def _write(self, route: Route) -> None:
                if not route.trickle:
                    self.wfile.write(route.body)
                    return
                for index in range(len(route.body)):
                    self.wfile.write(route.body[index : index + 1])
                    self.wfile.flush()
                    time.sleep(route.trickle)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that refused our certificate (a TLS test)

        self.httpd = Server((host, 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        # A short poll interval: shutdown() waits for one.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}
        )

    @property
    def port(self) -> int:
        return self.httpd.server_port

    def url(self, path: str, host: str | None = None) -> str:
        return f"{self.scheme}://{host or self.host}:{self.port}{path}"

    def json(self, path: str, document: Any, status: int = 200) -> str:
        self.routes[path] = Route(status, json.dumps(document).encode())
        return self.url(path)

    def raw(
        self,
        path: str,
        body: bytes,
        status: int = 200,
        delay: float = 0.0,
        trickle: float = 0.0,
        sized: bool = True,
    ) -> str:
        self.routes[path] = Route(status, body, delay, trickle=trickle, sized=sized)
        return self.url(path)

    def answer(self, path: str, respond: Callable[[dict[str, str]], Route]) -> str:
        """Answer ``path`` with whatever query by ``respond(query)``."""
        self.answers[path] = respond
        return self.url(path)

    def answer_to(self, target: str) -> Route:
        parts = urlsplit(target)
        respond = self.answers.get(parts.path)
        if respond is None:
            return Route(404, b'{"error": "not found"}')
        return respond(dict(parse_qsl(parts.query, keep_blank_values=True)))

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        self.routes[path] = Route(status, b"", headers={"Location": location})
        return self.url(path)

    def __enter__(self) -> SourceServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
