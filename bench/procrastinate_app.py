"""procrastinate's side of the benchmark: its app and the no-op task.

The worker runs as ``procrastinate --app=bench.procrastinate_app.app worker``; the
database comes from ``BENCH_PROCRASTINATE_DSN`` (a scratch database the bench creates).
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

from bench import probe

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_DSN", "")))


@app.task(name="bench.noop")
def noop(probe_id: str | None = None) -> None:
    probe.started(probe_id)
