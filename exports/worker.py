"""The export worker: one per pod, stateless, a remote worker of the engine
(``jobs.remote_client``). It holds no credentials for Conveyor's database, only the
token of a ``JOBS_REMOTE_WORKERS`` credential that serves the ``exports`` queue.

Each pass claims up to 10 export jobs (as many as it has room for): fresh exports, and
submitted UNLOADs whose next poll is due (a poll is the end of the engine job's
snooze). Exports run as asyncio tasks; the blocking parts (a query streamed into
Parquet, a Trino call) run on a small, fixed pool of threads, so many jobs are in
flight without a thread each. While the worker holds a job, the client's heartbeats
renew its lease, every third of it; a job the engine takes away (an operator's cancel,
the maximum duration, a lease that ran out) is stopped at once: its PostgreSQL or Trino
query is cancelled and its partial file removed. Everything that must survive a crash
is the engine's and the export row's: the claim, the submitted query's id and next URI,
the poll count and the next poll's time.

A direct export writes ``part-g<claim>.parquet`` into the job's folder and completes
with its rows, bytes and file. A Trino job without a role fails at once, and so does
one whose query is not one query (nothing is sent to Trino); a Trino direct export that
times out (a cold cluster) is tried twice more, 5 s apart, and then its attempt fails
and the engine tries again after its backoff. Without direct export the worker submits
``system.unload`` and the job sleeps until its next poll, on the Fibonacci schedule the
export's type decides; an engine without ``system.unload`` gets the job exported
directly in the same claim instead, and its history says so.

SIGTERM stops the claiming; running exports get ``grace_seconds`` to finish, and what is
still running then is handed back to the engine, its attempt given back. ``/health``
answers while the loop runs, ``/ready`` while it is not stopping and the control plane
answered its last call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from exports.engines import Cancellation
from exports.spec import JobSpec, relative_inside
from jobs import ControlPlaneError, JobLost, RemoteClient, RemoteJob

logger = logging.getLogger(__name__)
T = TypeVar("T")

MISSING_ROLE = "Missing use case ID (X-Use-Case-Id header required)"
QUEUE = "exports"
# What a worker asks of a snooze; the export's type answers with its poll schedule.
FIRST_POLL_SECONDS = 2.0


@dataclass
class WorkerSettings:
    name: str
    direct_export: bool = True
    claim_limit: int = 10
    # Exports and engine calls at once: the thread pool's size.
    threads: int = 4
    # Jobs held at once (those beyond the threads wait their turn, their leases renewed):
    # no claim is made while this many are held.
    max_in_flight: int = 20
    pass_seconds: float = 5.0
    idle_seconds: float = 10.0
    grace_seconds: float = 240.0
    cold_start_retries: int = 2
    cold_start_pause_seconds: float = 5.0
    storage_options: dict[str, Any] = field(default_factory=dict)


class ExportWorker:
    def __init__(
        self,
        client: RemoteClient,
        settings: WorkerSettings,
        *,
        engine_for: Callable[[str], Any],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.settings = settings
        self._engine_for = engine_for
        self._sleep = sleep  # the cold-start pause, in a pool thread (tests pass their own)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.threads, thread_name_prefix="export"
        )
        self._running: dict[int, asyncio.Task[None]] = {}
        self._held: dict[int, RemoteJob] = {}
        self.stopping = asyncio.Event()
        self.last_pass = time.monotonic()
        self.control_plane_ok = False

    @property
    def name(self) -> str:
        return self.settings.name

    async def _in_pool(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        logger.info("export worker %s started", self.name)
        beating = asyncio.Event()
        keeper = asyncio.get_running_loop().create_task(self.client.keep_leases(beating))
        try:
            while not self.stopping.is_set():
                try:
                    busy = await self.run_pass()
                    self.control_plane_ok = True
                except ControlPlaneError as error:
                    self.control_plane_ok, busy = False, False
                    logger.warning("export worker %s: %s", self.name, error)
                self.last_pass = time.monotonic()
                wait = self.settings.pass_seconds if busy else self.settings.idle_seconds
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), timeout=wait)
            await self.drain()
        finally:
            beating.set()
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            self._pool.shutdown(wait=False, cancel_futures=True)
            await self.client.close()
        logger.info("export worker %s stopped", self.name)

    async def run_pass(self) -> bool:
        """Claim and start what there is room for; True if there was work."""
        room = min(self.settings.claim_limit, self.settings.max_in_flight - len(self._running))
        if room <= 0 or self.stopping.is_set():
            return False
        claim = await self.client.claim(room, queues=[QUEUE])
        for job in claim.jobs:
            self._start(job)
        return bool(claim.jobs)

    def _start(self, job: RemoteJob) -> None:
        """Run the job as a task; it is held (handed back at a shutdown) until it ends."""
        task = asyncio.get_running_loop().create_task(self._work(job), name=f"export-job-{job.id}")
        self._running[job.id], self._held[job.id] = task, job

        def ended(_: asyncio.Task[None]) -> None:
            self._running.pop(job.id, None)
            self._held.pop(job.id, None)

        task.add_done_callback(ended)

    async def wait_idle(self) -> None:
        """Until every job this worker started has ended (tests, and the drain)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def drain(self) -> None:
        """On the way out: give running exports the grace period, then stop the rest and
        hand their jobs back."""
        if self._running:
            logger.info(
                "export worker %s: waiting up to %.0f s for %d export(s)",
                self.name,
                self.settings.grace_seconds,
                len(self._running),
            )
            # asyncio.wait, not wait_for: the exports still running must not be cancelled
            # before their jobs are handed back.
            await asyncio.wait(list(self._running.values()), timeout=self.settings.grace_seconds)
        left = [self._held[job_id] for job_id in list(self._running) if job_id in self._held]
        for job in left:
            job.lose("the worker is shutting down")
        if left:
            with contextlib.suppress(JobLost, ControlPlaneError):
                handed = await self.client.release(left)
                logger.info("export worker %s: %d job(s) handed back", self.name, handed)
        stopped = list(self._running.values())
        for task in stopped:
            task.cancel()
        await asyncio.gather(*stopped, return_exceptions=True)

    # -- one job --------------------------------------------------------------------

    async def _work(self, job: RemoteJob) -> None:
        spec = JobSpec.from_json(job.details.get("spec") or {})
        try:
            if spec.status == "submitted":
                await self._poll(job, spec)
            elif spec.engine == "trino" and not spec.starburst_role:
                await self.client.fail(job, MISSING_ROLE, permanent=True)
            elif self.settings.direct_export or spec.engine != "trino":
                await self._direct(job, spec)
            else:
                await self._submit(job, spec)
        except JobLost as lost:
            logger.warning("export job %s: %s", spec.id, lost)
        except ControlPlaneError as error:
            # The lease runs out and the engine takes the job back: nothing is lost.
            logger.error("export job %s: control plane unreachable: %s", spec.id, error)
        except Exception as error:  # no engine for it, a bad spec: the job says why
            logger.exception("export job %s failed", spec.id)
            with contextlib.suppress(JobLost, ControlPlaneError):
                await self.client.fail(job, _describe(error), permanent=_permanent(error))

    async def _complete(self, job: RemoteJob, spec: JobSpec, written: Any, note: str = "") -> None:
        inside = [relative_inside(location, spec.destination) or location for location in written.files]
        result = {"rows": written.rows, "bytes": written.size, "files": inside}
        if note:
            result["note"] = note
        await self.client.complete(job, result)

    async def _direct(self, job: RemoteJob, spec: JobSpec, *, note: str = "") -> None:
        file_name = f"part-g{spec.generation}.parquet"
        engine = self._engine_for(spec.engine)
        cancellation = Cancellation()
        watcher = asyncio.get_running_loop().create_task(self._stop_when_lost(job, cancellation))
        try:
            written = await self._in_pool(self._export_direct, engine, spec, file_name, cancellation)
        except Exception as error:
            if cancellation.cancelled:
                # Taken from this worker while it ran: its query is cancelled and its
                # partial file gone; the job's new owner (or its end) is not ours to report.
                logger.warning("export job %s stopped: %s", spec.id, cancellation.reason)
                return
            await self.client.fail(job, _describe(error), permanent=_permanent(error))
            return
        finally:
            watcher.cancel()
        try:
            if job.lost.is_set():
                raise JobLost({"id": job.id, "reason": job.lost_reason})
            await self._complete(job, spec, written, note)
        except JobLost:
            # The job is not this claim's any more: what it wrote is not the snapshot's.
            await self._in_pool(_remove, written.files, self.settings.storage_options)
            raise

    async def _stop_when_lost(self, job: RemoteJob, cancellation: Cancellation) -> None:
        await job.lost.wait()
        # Off the event loop (a cancel request is a round trip to the engine), and off the
        # export pool, whose threads may all be busy exporting.
        await asyncio.get_running_loop().run_in_executor(None, cancellation.cancel, job.lost_reason)

    def _export_direct(self, engine: Any, spec: JobSpec, file_name: str, cancellation: Cancellation) -> Any:
        if spec.engine != "trino":
            return engine.export_direct(spec, file_name, cancellation)
        from exports.engines.trino import retry_cold_start

        return retry_cold_start(
            lambda: engine.export_direct(spec, file_name, cancellation),
            retries=self.settings.cold_start_retries,
            pause_seconds=self.settings.cold_start_pause_seconds,
            sleep=self._sleep,
        )

    async def _submit(self, job: RemoteJob, spec: JobSpec) -> None:
        from exports.engines.trino import UnloadUnavailable

        engine = self._engine_for("trino")
        try:
            submitted = await self._in_pool(
                engine.submit_unload, dataclasses.replace(spec, destination=spec.claim_folder)
            )
        except UnloadUnavailable as error:
            await self._direct(job, spec, note=_fallback_note(error))
            return
        except Exception as error:
            await self.client.fail(job, _describe(error), permanent=_permanent(error))
            return
        try:
            await self.client.snooze(
                job,
                FIRST_POLL_SECONDS,
                f"query {submitted.query_id} submitted",
                details={"query_id": submitted.query_id, "next_uri": submitted.next_uri},
            )
        except (JobLost, asyncio.CancelledError):
            # A submission the engine no longer wants (cancelled, or the lease lost while
            # submitting), or one a stopping worker leaves unrecorded: its query must not
            # run on. (One the control plane may have recorded is left to the polls.)
            await self._in_pool(
                _cancel, engine, submitted.next_uri or submitted.query_id, spec.starburst_role
            )
            raise

    # -- polling a submitted UNLOAD -------------------------------------------------

    async def _poll(self, job: RemoteJob, spec: JobSpec) -> None:
        from exports import parquet
        from exports.engines.trino import is_unload_missing

        engine = self._engine_for("trino")
        try:
            try:
                state = await self._in_pool(engine.poll, spec.next_uri, spec.starburst_role)
            except Exception as error:
                # An expired or lost next URI: the query itself can still be asked about.
                logger.info("export job %s: poll failed (%s); asking by query id", spec.id, error)
                state = await self._in_pool(engine.status, spec.query_id, spec.starburst_role)
        except Exception as error:
            # Polled again at its next turn; the reconciliation asks Trino after a long silence.
            logger.warning("export job %s: poll failed: %s", spec.id, error)
            await self.client.snooze(
                job, FIRST_POLL_SECONDS, f"poll failed: {_describe(error)}"[:300], details={"next_uri": ""}
            )
            return
        if state.state == "FINISHED":
            written = await self._in_pool(
                parquet.count_rows, spec.claim_folder, self.settings.storage_options
            )
            await self._complete(job, spec, written)
        elif state.state == "FAILED" and is_unload_missing(state.error_name, state.error):
            await self._direct(job, spec, note=_fallback_note(state.error))
        elif state.state == "FAILED":
            await self.client.fail(job, state.error or "query failed", permanent=True)
        else:
            await self.client.snooze(
                job,
                FIRST_POLL_SECONDS,
                f"query {spec.query_id} {state.state}",
                details={"next_uri": state.next_uri},
            )


def _fallback_note(error: Any) -> str:
    return f"system.unload is not available on the engine ({error}): exported directly instead"


def _permanent(error: BaseException) -> bool:
    """Whether another attempt would fail the same way: an engine's answer about the query
    would, a cold cluster or a dropped connection might not."""
    import psycopg

    from exports.engines.trino import ColdStartExhausted

    return not isinstance(error, ColdStartExhausted | OSError | psycopg.OperationalError)


def _describe(error: BaseException) -> str:
    name = type(error).__name__
    # Said in their own words: an engine's error names itself (``TABLE_NOT_FOUND: …``).
    if name in ("ColdStartExhausted", "EngineError"):
        return str(error)
    text = str(error).strip()
    return f"{name}: {text}" if text else name


def _cancel(engine: Any, query: str, role: str) -> None:
    try:
        engine.cancel(query, role)
    except Exception as error:
        logger.warning("could not cancel query %s: %s", query, error)


def _remove(files: list[str], storage_options: dict[str, Any]) -> None:
    from exports import parquet

    for url in files:
        fs, path = parquet.open_destination(url, storage_options)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path)
