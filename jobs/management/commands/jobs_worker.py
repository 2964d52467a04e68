"""``manage.py jobs_worker``: run engine workers in the foreground, without django-q2.

The cluster (``manage.py qcluster``) is how Conveyor normally runs jobs. This command
is for a shell, a benchmark or a test: it runs one or more ``EngineWorker`` threads in
this process, and with ``--exit-when-idle`` drains what is due and exits. SIGTERM or
SIGINT stops it cleanly: each worker finishes its current job and hands back the rest
of its claimed batch. Workers wait out database faults; should one end for any other
reason, the others are stopped the same way and the command fails (exit status 1), so
that whatever supervises it starts a fresh process.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from jobs.management.tables import name_list, positive_int
from jobs.worker import EngineWorker, default_worker_name

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Run engine workers in the foreground (outside the django-q2 cluster). "
        "SIGTERM/SIGINT stop them after their current job."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            type=name_list,
            metavar="A,B",
            help="Serve only these queues (default: JOBS_QUEUES, or all).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            metavar="N",
            help="Jobs taken per claim (default: JOBS_CLAIM_BATCH).",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=1,
            metavar="N",
            help="Worker threads in this process (default 1).",
        )
        parser.add_argument(
            "--exit-when-idle", action="store_true", help="Drain the due jobs, then exit (tests, benchmarks)."
        )

    def handle(
        self,
        *args: Any,
        queues: list[str] | None,
        batch_size: int | None,
        concurrency: int,
        exit_when_idle: bool,
        **options: Any,
    ) -> None:
        base = default_worker_name()
        workers = [
            EngineWorker(
                name=f"{base}-{n}" if concurrency > 1 else base,
                queues=queues,
                batch_size=batch_size,
                exit_when_stuck=True,
            )
            for n in range(1, concurrency + 1)
        ]
        mode = "until idle" if exit_when_idle else "until stopped"
        self.stdout.write(f"Running {len(workers)} worker(s) {mode}: {', '.join(w.name for w in workers)}")
        with _stop_on_signals(workers):
            self._run(workers, exit_when_idle)
        done = sum(w.jobs_done for w in workers)
        self.stdout.write(self.style.SUCCESS(f"Stopped after {done} job(s)."))

    def _run(self, workers: list[EngineWorker], exit_when_idle: bool) -> None:
        errors: list[str] = []
        threads = [
            threading.Thread(target=_run_worker, args=(w, exit_when_idle, errors), name=w.name)
            for w in workers
        ]
        for thread in threads:
            thread.start()
        # Short joins keep the main thread free to run the signal handlers.
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=0.2)
            if errors:  # one worker is gone: the process ends, to be replaced whole
                for worker in workers:
                    worker.stop()
        if errors:
            raise CommandError("; ".join(errors))


def _run_worker(worker: EngineWorker, exit_when_idle: bool, errors: list[str]) -> None:
    try:
        worker.run(exit_when_idle=exit_when_idle)
    except BaseException as error:  # SystemExit too: a thread's would end it silently
        logger.exception("worker %s failed", worker.name)
        errors.append(f"worker {worker.name} failed: {type(error).__name__}: {error}")
    finally:
        connections.close_all()


@contextmanager
def _stop_on_signals(workers: list[EngineWorker]) -> Iterator[None]:
    """SIGTERM and SIGINT ask every worker to stop after its current job."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def stop(signum: int, frame: Any) -> None:
        for worker in workers:
            worker.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
