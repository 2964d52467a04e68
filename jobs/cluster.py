"""How the django-q2 cluster runs the engine.

django-q2 is not Conveyor's queue. Measured on this kind of machine, one django-q2 task
per job caps out at 40–800 tasks/s with about 100 ms from enqueue to start (its ORM
broker polls), and its ``retry`` is a visibility timeout with no backoff or error
classes. So the Job table is the queue, and django-q2 supplies what it is good at: a
supervised pool of worker processes (reincarnated when they die) and the scheduler
for periodic work.

Each django-q2 worker process, right after it is spawned, starts one ``EngineWorker``
thread that claims batches from the Job table and sleeps on LISTEN/NOTIFY. The
django-q2 worker's own main thread keeps serving the scheduler's tasks. When the
cluster stops (SIGTERM or Ctrl-C to ``manage.py qcluster``), django-q2 sends each worker
its stop pill; as the process winds down, a multiprocessing finaliser stops the engine
worker, which finishes its current job and hands back the rest of its batch before
the process exits.

django-q2 replaces a worker process only when it dies; an engine thread that ended inside
a live process would go unnoticed, and the cluster would run with one engine fewer for
good. The engine waits out database faults itself, so it ends only when asked to, or
for something it cannot recover from (a handler that called ``sys.exit``, a bug): then
the process exits with ``EXIT_ENGINE_ENDED`` and django-q2 starts a fresh one.
"""

from __future__ import annotations

import logging
import os
import threading
from multiprocessing import util
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.dispatch import receiver
from django_q.signals import post_spawn

from jobs.worker import EngineWorker

logger = logging.getLogger(__name__)

# The exit status of a worker process whose engine thread ended without being asked to
# (EX_TEMPFAIL: its supervisor should start another).
EXIT_ENGINE_ENDED = 75

_worker: EngineWorker | None = None
_thread: threading.Thread | None = None


@receiver(post_spawn, dispatch_uid="conveyor-engine-worker")
def start_engine_worker(sender: Any = None, proc_name: str = "", **kwargs: Any) -> None:
    if not getattr(settings, "JOBS_RUN_IN_CLUSTER", True):
        return
    start()


def start() -> EngineWorker:
    """Start this process's engine worker thread (once)."""
    global _worker, _thread
    if _worker is not None:
        return _worker
    close_old_connections()
    _worker = EngineWorker(exit_when_stuck=True)
    # Not a daemon: the interpreter waits for the current job to finish before exiting.
    _thread = threading.Thread(target=_run, args=(_worker,), name="conveyor-engine", daemon=False)
    _thread.start()
    # Runs when the django-q2 worker function returns (its stop pill), before exit.
    util.Finalize(None, stop, exitpriority=100)
    return _worker


def _run(worker: EngineWorker) -> None:
    """The engine thread: run the worker; if it ends without a stop request, end the
    process so that django-q2 replaces it."""
    try:
        worker.run()
    except BaseException:  # SystemExit too: a thread's would end it silently
        logger.exception("engine worker %s failed", worker.name)
    if worker.stop_requested:
        return
    logger.critical(
        "engine worker %s ended without a stop request; exiting so that the cluster replaces this process",
        worker.name,
        extra={"worker": worker.name},
    )
    logging.shutdown()
    os._exit(EXIT_ENGINE_ENDED)


def stop(timeout: float | None = None) -> None:
    """Ask the engine worker to stop and wait for its current job to finish."""
    if _worker is None or _thread is None:
        return
    _worker.stop()
    _thread.join(timeout)
