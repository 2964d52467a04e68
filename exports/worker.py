"""The export worker: one per pod, stateless, talking to Conveyor only through the control
plane's internal API (``exports.control_plane``).

Each pass claims up to 10 pending jobs (as many as it has room for), starts their
exports, and polls up to 50 submitted jobs that are due; then it waits 5 s, or 10 s
when there was nothing to do. Exports run as asyncio tasks; the blocking parts (a query
streamed into Parquet, a Trino call) run on a small, fixed pool of threads, so many jobs
are in flight without a thread each. Everything that must survive a crash is in the
database: the claim (renewed by a heartbeat while a direct export runs), the submitted
query's id and next URI, the poll count and the next poll's time.

A direct export writes ``part-g<claim>.parquet`` into the job's folder after clearing
what an earlier claim may have left there, and reports it completed. Every report
carries the secret the claim (or the poll) came with. A Trino job without a role fails
at once, and so does one whose query is not one query (nothing is sent to Trino). A
Trino direct export that times out (a cold cluster) is retried twice, 5 s apart.
Without direct export the worker submits ``system.unload`` and the polls follow the
query; an engine without ``system.unload`` gets the job exported directly instead, and
its history says so.

SIGTERM stops the claiming; running exports get ``grace_seconds`` to finish, and what is
still running then is handed back to pending. ``/health`` answers while the loop runs,
``/ready`` while it is not stopping and the control plane answered its last call.
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

import httpx

from exports.engines import Cancellation
from exports.spec import JobSpec

logger = logging.getLogger(__name__)
T = TypeVar("T")

MISSING_ROLE = "Missing use case ID (X-Use-Case-Id header required)"


class ClaimLost(Exception):
    """The control plane refused a report: the job is no longer this worker's to change."""


class ControlPlaneError(Exception):
    """The control plane could not be reached or answered an error."""


class ControlPlane:
    """The internal API's client: bounded timeouts, the worker token, JSON both ways."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            transport=transport,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
        )

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as error:
            raise ControlPlaneError(f"{path}: {type(error).__name__}: {error}") from error
        if response.status_code == 409:
            raise ClaimLost(response.json().get("detail", "claim lost"))
        if response.status_code >= 400:
            raise ControlPlaneError(f"{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json()

    async def claim(self, worker: str, limit: int) -> list[JobSpec]:
        answer = await self._post("/internal/exports/claim", {"worker": worker, "limit": limit})
        return [JobSpec.from_json(job) for job in answer["jobs"]]

    async def pollable(self, worker: str, limit: int) -> list[JobSpec]:
        answer = await self._post("/internal/exports/pollable", {"worker": worker, "limit": limit})
        return [JobSpec.from_json(job) for job in answer["jobs"]]

    async def report(self, job: JobSpec, status: str, worker: str, **fields: Any) -> JobSpec:
        """The job as the control plane has it after the report, still holding the
        secret this worker reported with (an answer never repeats it)."""
        body = {
            "status": status,
            "generation": job.generation,
            "worker": worker,
            "claim_token": job.claim_token,
            **fields,
        }
        answer = await self._post(f"/internal/exports/jobs/{job.id}/report", body)
        return dataclasses.replace(JobSpec.from_json(answer["job"]), claim_token=job.claim_token)

    async def finalize(self, snapshot_id: int) -> str:
        answer = await self._post(f"/internal/exports/snapshots/{snapshot_id}/finalize", {})
        return answer["status"]

    async def close(self) -> None:
        await self._client.aclose()


@dataclass
class WorkerSettings:
    name: str
    direct_export: bool = True
    claim_limit: int = 10
    poll_limit: int = 50
    # Exports and engine calls at once: the thread pool's size.
    threads: int = 4
    # Claimed jobs held at once (those beyond the threads wait their turn, their claims
    # renewed): a claim is not taken while this many are held.
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
        control_plane: ControlPlane,
        settings: WorkerSettings,
        *,
        engine_for: Callable[[str], Any],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cp = control_plane
        self.settings = settings
        self._engine_for = engine_for
        self._sleep = sleep  # the cold-start pause, in a pool thread (tests pass their own)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.threads, thread_name_prefix="export"
        )
        self._running: dict[int, asyncio.Task[None]] = {}
        self._held: dict[int, JobSpec] = {}
        # How to stop each direct export running on the pool (a thread cannot be
        # interrupted; its query can).
        self._cancellations: dict[int, Cancellation] = {}
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
        logger.info("export worker %s stopped", self.name)

    async def run_pass(self) -> bool:
        """Claim and start what there is room for, then poll what is due; True if either
        found work."""
        claimed = await self.claim_pass()
        polled = await self.poll_pass()
        return bool(claimed or polled)

    async def claim_pass(self) -> int:
        room = min(self.settings.claim_limit, self.settings.max_in_flight - len(self._running))
        if room <= 0 or self.stopping.is_set():
            return 0
        claimed = await self.cp.claim(self.name, room)
        for job in claimed:
            self._start(job, self._export(job))
        return len(claimed)

    def _start(self, job: JobSpec, work: Any) -> None:
        """Run ``work`` on ``job`` as a task; the job is held (handed back at a shutdown)
        until the task ends."""
        task = asyncio.get_running_loop().create_task(work, name=f"export-{job.id}")
        self._running[job.id], self._held[job.id] = task, job

        def ended(_: asyncio.Task[None]) -> None:
            self._running.pop(job.id, None)
            self._held.pop(job.id, None)

        task.add_done_callback(ended)

    async def poll_pass(self) -> int:
        if self.stopping.is_set():
            return 0
        due = await self.cp.pollable(self.name, self.settings.poll_limit)
        await asyncio.gather(*(self._poll(job) for job in due))
        return len(due)

    async def wait_idle(self) -> None:
        """Until every export this worker started has ended (tests, and the drain)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def drain(self) -> None:
        """On the way out: give running exports the grace period, then hand back the
        jobs still held."""
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
        for job_id, task in list(self._running.items()):
            job = self._held.get(job_id)
            stopping = self._cancellations.get(job_id)
            if stopping is not None:
                await self._stop(stopping, "the worker is shutting down")
            task.cancel()
            if job is not None:
                with contextlib.suppress(ClaimLost, ControlPlaneError):
                    await self.cp.report(job, "pending", self.name)
                    logger.info("export job %s handed back", job_id)
        self._pool.shutdown(wait=False, cancel_futures=True)
        await self.cp.close()

    # -- exporting a claimed job ----------------------------------------------------

    async def _export(self, job: JobSpec, *, direct: bool = False) -> None:
        """Export a job this worker holds: directly, or (Trino, ``DIRECT_EXPORT=false``
        and not ``direct``) by submitting an UNLOAD."""
        try:
            if job.engine == "trino" and not job.starburst_role:
                await self._finish(job, "failed", error_message=MISSING_ROLE)
            elif direct or self.settings.direct_export or job.engine != "trino":
                await self._direct(job)
            else:
                await self._submit(job)
        except ClaimLost as lost:
            logger.warning("export job %s: %s", job.id, lost)
        except ControlPlaneError as error:
            # The claim times out and the job goes back to pending: nothing is lost.
            logger.error("export job %s: control plane unreachable: %s", job.id, error)
        except Exception as error:  # no engine for it, a bad spec: the job says why
            logger.exception("export job %s failed", job.id)
            with contextlib.suppress(ClaimLost, ControlPlaneError):
                await self._finish(job, "failed", error_message=_describe(error))

    async def _finish(self, job: JobSpec, status: str, **fields: Any) -> None:
        await self.cp.report(job, status, self.name, **fields)
        await self.cp.finalize(job.snapshot_id)

    async def _direct(self, job: JobSpec) -> None:
        from exports import parquet

        file_name = f"part-g{job.generation}.parquet"
        engine = self._engine_for(job.engine)
        cancellation = self._cancellations[job.id] = Cancellation()
        beat = asyncio.get_running_loop().create_task(self._heartbeat(job, cancellation))
        try:
            written = await self._in_pool(self._export_direct, engine, job, file_name, cancellation)
        except Exception as error:
            if cancellation.cancelled:
                # Taken from this worker while it ran: its query is cancelled and its
                # partial file gone; the job's new owner (or its end) is not ours to report.
                logger.warning("export job %s stopped: %s", job.id, cancellation.reason)
                return
            await self._finish(job, "failed", error_message=_describe(error))
            return
        finally:
            beat.cancel()
            self._cancellations.pop(job.id, None)
        try:
            await self._finish(
                job, "completed", row_count=written.rows, size_bytes=written.size, files=written.files
            )
        except ClaimLost:
            # Another claim owns the job now: what this one wrote is not the snapshot's.
            await self._in_pool(_remove, written.files, self.settings.storage_options)
            raise
        # What an earlier claim's lost export may have written since is not the snapshot's.
        await self._in_pool(
            parquet.remove_files, job.destination, written.files, self.settings.storage_options
        )

    def _export_direct(self, engine: Any, job: JobSpec, file_name: str, cancellation: Cancellation) -> Any:
        if job.engine != "trino":
            return engine.export_direct(job, file_name, cancellation)
        from exports.engines.trino import retry_cold_start

        return retry_cold_start(
            lambda: engine.export_direct(job, file_name, cancellation),
            retries=self.settings.cold_start_retries,
            pause_seconds=self.settings.cold_start_pause_seconds,
            sleep=self._sleep,
        )

    async def _heartbeat(self, job: JobSpec, cancellation: Cancellation) -> None:
        """Keep the claim while the export runs, as often as the control plane said (a
        third of its claim timeout, at most 5 s); stop the export once the claim is
        refused: the job was cancelled, ran past its maximum duration, or was reset."""
        while True:
            await asyncio.sleep(job.heartbeat_seconds)
            try:
                await self.cp.report(job, "claimed", self.name)
            except ClaimLost as lost:
                await self._stop(cancellation, str(lost))
                return
            except ControlPlaneError as error:
                logger.warning("export job %s: heartbeat failed: %s", job.id, error)

    @staticmethod
    async def _stop(cancellation: Cancellation, reason: str) -> None:
        # Off the event loop (a cancel request is a round trip to the engine), and off the
        # export pool, whose threads may all be busy exporting.
        await asyncio.get_running_loop().run_in_executor(None, cancellation.cancel, reason)

    async def _submit(self, job: JobSpec) -> None:
        from exports.engines.trino import UnloadUnavailable

        engine = self._engine_for("trino")
        try:
            submitted = await self._in_pool(
                engine.submit_unload, dataclasses.replace(job, destination=job.claim_folder)
            )
        except UnloadUnavailable as error:
            await self.cp.report(job, "claimed", self.name, note=_fallback_note(error))
            await self._direct(job)
            return
        except Exception as error:
            await self._finish(job, "failed", error_message=_describe(error))
            return
        try:
            await self.cp.report(
                job, "submitted", self.name, query_id=submitted.query_id, next_uri=submitted.next_uri
            )
        except ClaimLost:
            # A late submission from a claim that was reset: its query must not run on.
            await self._in_pool(_cancel, engine, submitted.next_uri or submitted.query_id, job.starburst_role)
            raise

    # -- polling a submitted job ----------------------------------------------------

    async def _poll(self, job: JobSpec) -> None:
        from exports import parquet
        from exports.engines.trino import is_unload_missing

        engine = self._engine_for("trino")
        try:
            try:
                state = await self._in_pool(engine.poll, job.next_uri, job.starburst_role)
            except Exception as error:
                # An expired or lost next URI: the query itself can still be asked about.
                logger.info("export job %s: poll failed (%s); asking by query id", job.id, error)
                state = await self._in_pool(engine.status, job.query_id, job.starburst_role)
            if state.state == "FINISHED":
                written = await self._in_pool(
                    parquet.count_rows, job.claim_folder, self.settings.storage_options
                )
                await self._finish(
                    job, "completed", row_count=written.rows, size_bytes=written.size, files=written.files
                )
                await self._in_pool(
                    parquet.remove_files, job.destination, written.files, self.settings.storage_options
                )
            elif state.state == "FAILED" and is_unload_missing(state.error_name, state.error):
                taken = await self.cp.report(
                    job, "claimed", self.name, poll_count=job.poll_count, note=_fallback_note(state.error)
                )
                self._start(taken, self._export(taken, direct=True))
            elif state.state == "FAILED":
                await self._finish(job, "failed", error_message=state.error or "query failed")
            else:
                await self.cp.report(
                    job, "submitted", self.name, poll_count=job.poll_count, next_uri=state.next_uri
                )
        except ClaimLost as lost:
            logger.info("export job %s: %s", job.id, lost)
        except ControlPlaneError as error:
            logger.warning("export job %s: %s", job.id, error)
        except Exception as error:
            # The job stays submitted; its poll lease runs out and it is polled again.
            logger.warning("export job %s: poll failed: %s", job.id, error)


def _fallback_note(error: Any) -> str:
    return f"system.unload is not available on the engine ({error}): exported directly instead"


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
