"""``manage.py export_worker``: one export worker (one per pod in production).

It is a remote worker of the engine: it reaches Conveyor only through the internal API
(``/internal/jobs/…``), with the token in ``EXPORTS_WORKER_TOKEN`` (a
``JOBS_REMOTE_WORKERS`` credential serving the ``exports`` queue); it never opens
Conveyor's database. Its query engines are its
own: Trino (``EXPORTS_TRINO_*``) and, for datasets, ``EXPORTS_POSTGRES_URL`` (a read-only
role; the app's database when unset, as in development). SIGTERM or SIGINT stops it:
no more claims, running exports get the grace period, the rest are handed back to the
engine; exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from exports import conf, engines, health, parquet
from exports.worker import ExportWorker, WorkerSettings
from jobs import RemoteClient


def engine_for(name: str) -> Any:
    if name == "trino":
        return engines.trino_engine()
    if name == "postgres":
        return engines.postgres_engine()
    raise engines.NotConfigured(f"no engine {name!r}")


# The engine takes a remote worker's name of up to 120 characters (it shows it after its
# credential's): a longer pod name is cut.
WORKER_NAME_LENGTH = 120


class Command(BaseCommand):
    help = "Run an export worker: claim, export and poll snapshot jobs until SIGTERM."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--control-plane",
            default=os.environ.get("EXPORTS_CONTROL_PLANE_URL", "http://127.0.0.1:8000"),
            help="The control plane's base URL (default: $EXPORTS_CONTROL_PLANE_URL).",
        )
        parser.add_argument(
            "--name",
            default=os.environ.get("HOSTNAME") or f"{socket.gethostname()}-{os.getpid()}",
            help="This worker's name in claims (default: the pod's name), after its credential's.",
        )
        parser.add_argument("--host", default="0.0.0.0", help="Where /health and /ready listen.")
        parser.add_argument(
            "--port",
            type=int,
            default=int(os.environ.get("EXPORTS_WORKER_PORT", "8080")),
            help="Their port; 0 picks a free one (printed).",
        )
        parser.add_argument("--pass-seconds", type=float, default=5.0)
        parser.add_argument("--idle-seconds", type=float, default=10.0)
        parser.add_argument(
            "--grace-seconds",
            type=float,
            default=240.0,
            help="How long running exports may finish after SIGTERM.",
        )
        parser.add_argument("--threads", type=int, default=4, help="Exports and engine calls at once.")

    def handle(self, *args: Any, **options: Any) -> None:
        # One line per control-plane call every few seconds says nothing an operator needs.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        token = conf.get("WORKER_TOKEN")
        if not token:
            raise CommandError(
                "EXPORTS_WORKER_TOKEN is not set: the engine would refuse this worker's claims"
            )
        if options["threads"] < 1 or options["pass_seconds"] <= 0 or options["idle_seconds"] <= 0:
            raise CommandError("--threads, --pass-seconds and --idle-seconds must be positive")
        parquet.use_jemalloc()
        settings = WorkerSettings(
            name=options["name"][:WORKER_NAME_LENGTH],
            direct_export=bool(conf.get("DIRECT_EXPORT")),
            claim_limit=int(conf.get("CLAIM_LIMIT")),
            threads=options["threads"],
            pass_seconds=options["pass_seconds"],
            idle_seconds=options["idle_seconds"],
            grace_seconds=options["grace_seconds"],
            storage_options=dict(conf.get("STORAGE_OPTIONS")),
        )
        asyncio.run(self._run(settings, options))
        if any(
            thread.is_alive() and not thread.daemon
            for thread in threading.enumerate()
            if thread is not threading.main_thread()
        ):
            # Exports abandoned at the grace period's end (handed back already) must not
            # hold the exit: their threads cannot be interrupted.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    async def _run(self, settings: WorkerSettings, options: dict[str, Any]) -> None:
        client = RemoteClient(options["control_plane"], conf.get("WORKER_TOKEN"), worker=settings.name)
        worker = ExportWorker(client, settings, engine_for=engine_for)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stopping.set)
        server = await health.serve(worker, options["host"], options["port"])
        port = server.sockets[0].getsockname()[1]
        self.stdout.write(f"export worker {settings.name} probes on {options['host']}:{port}")
        self.stdout.flush()
        try:
            await worker.run()
        finally:
            server.close()
            await server.wait_closed()
