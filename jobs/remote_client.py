"""The client side of remote workers (``jobs.remote``): what a worker outside the cluster
runs to take the engine's jobs over HTTP. It needs no database and no Django models.

    client = RemoteClient("https://conveyor.internal", token, worker="pod-a")
    claim = await client.claim(limit=4, queues=["exports"])
    keeper = asyncio.create_task(client.keep_leases())   # heartbeats, for every held job
    for job in claim.jobs:
        ...                          # the work; job.lost is set if the job is taken away
        await client.complete(job, result={"rows": 10})

``keep_leases`` beats as often as the claims said (a third of the shortest lease held),
sends each job's latest ``job.progress(...)`` with the beat, and sets ``job.lost`` (with
``job.lost_reason``) for a job the engine no longer gives this worker: an operator
cancelled or recovered it, it ran past its time limit, or the reaper took it back. It
also sets it when no beat has got through for a whole lease: the reaper will have
taken the job back by then, so the work must stop either way. Whatever the work was
doing then (a query, a file being written) is the worker's to stop and clean up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

logger = logging.getLogger(__name__)


class ControlPlaneError(Exception):
    """The control plane could not be reached, or answered an error."""


class JobLost(Exception):
    """A report on a job this worker no longer holds (409): ``lost`` says what became of it."""

    def __init__(self, lost: dict[str, Any]) -> None:
        super().__init__(f"job {lost.get('id')} is no longer this worker's: {lost.get('reason')}")
        self.lost = lost


@dataclass
class RemoteJob:
    """A job this worker holds under ``lease``."""

    id: int
    type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    lease: str
    lease_seconds: float
    deadline: str | None = None
    tenant: int | None = None
    # What the job's type adds for its workers (``jobs.remote_handler(describe=...)``).
    details: dict[str, Any] = field(default_factory=dict)
    lost: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    lost_reason: str = ""
    _progress: tuple[int, int | None, str] | None = field(default=None, repr=False)

    def progress(self, done: int, total: int | None = None, message: str = "") -> None:
        """The latest progress; the next heartbeat sends it (cheap enough for every row)."""
        self._progress = (int(done), None if total is None else int(total), message[:300])

    def lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    @classmethod
    def from_answer(cls, answer: dict[str, Any], lease: str) -> RemoteJob:
        return cls(
            id=answer["id"],
            type=answer["type"],
            queue=answer["queue"],
            payload=answer.get("payload") or {},
            attempt=answer["attempt"],
            max_attempts=answer["max_attempts"],
            lease=lease,
            lease_seconds=float(answer["lease_seconds"]),
            deadline=answer.get("deadline"),
            tenant=answer.get("tenant"),
            details=answer.get("details") or {},
        )


@dataclass
class Claim:
    lease: str
    heartbeat_seconds: float
    jobs: list[RemoteJob]


class RemoteClient:
    """Calls of the internal API for one worker: bounded timeouts, its bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        worker: str,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker = worker
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            transport=transport,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
        )
        self._monotonic = monotonic
        self.held: dict[int, RemoteJob] = {}
        self._beat_every: dict[str, float] = {}
        self._renewed_at: dict[str, float] = {}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(f"/internal/jobs/{path}", json={"worker": self.worker, **body})
        except httpx.HTTPError as error:
            raise ControlPlaneError(f"{path}: {type(error).__name__}: {error}") from error
        if response.status_code == 409:
            raise JobLost(response.json().get("lost") or {})
        if response.status_code >= 400:
            raise ControlPlaneError(f"{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json()

    # -- claiming and holding ---------------------------------------------------------

    async def claim(self, limit: int, queues: list[str] | None = None) -> Claim:
        """Take up to ``limit`` due jobs; their attempts are counted, and ``keep_leases``
        beats for them from now on."""
        body: dict[str, Any] = {"limit": limit}
        if queues:
            body["queues"] = queues
        answer = await self._post("claim", body)
        lease = str(answer["lease"])
        jobs = [RemoteJob.from_answer(job, lease) for job in answer["jobs"]]
        if jobs:
            self._beat_every[lease] = float(answer["heartbeat_seconds"])
            self._renewed_at[lease] = self._monotonic()
            for job in jobs:
                self.held[job.id] = job
        return Claim(lease, float(answer["heartbeat_seconds"]), jobs)

    def beat_interval(self) -> float:
        """How long until the next beat is due: the shortest interval of the leases held."""
        return min(self._beat_every.values(), default=1.0)

    async def heartbeat(self) -> None:
        """One beat per lease held: renew, send progress, and mark what was lost."""
        for lease in list(self._beat_every):
            jobs = [job for job in self.held.values() if job.lease == lease]
            if not jobs:
                self._forget_lease(lease)
                continue
            progress = {
                str(job.id): {
                    "done": job._progress[0],
                    "total": job._progress[1],
                    "message": job._progress[2],
                }
                for job in jobs
                if job._progress is not None
            }
            try:
                answer = await self._post(
                    "heartbeat", {"lease": lease, "jobs": [job.id for job in jobs], "progress": progress}
                )
            except ControlPlaneError as error:
                logger.warning("heartbeat of lease %s failed: %s", lease, error)
                self._lose_if_expired(lease, jobs)
                continue
            self._renewed_at[lease] = self._monotonic()
            self._beat_every[lease] = float(answer["heartbeat_seconds"])
            for lost in answer["lost"]:
                job = self.held.get(lost["id"])
                if job is not None:
                    job.lose(lost["reason"])
                    self._done(job)

    def _lose_if_expired(self, lease: str, jobs: list[RemoteJob]) -> None:
        quiet = self._monotonic() - self._renewed_at.get(lease, self._monotonic())
        for job in jobs:
            if quiet >= job.lease_seconds:
                job.lose(f"no heartbeat got through for {quiet:.0f} s: the lease has run out")
                self._done(job)

    async def keep_leases(self, stop: asyncio.Event | None = None) -> None:
        """Beat until ``stop`` is set (or the task is cancelled)."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.beat_interval())
            if not stop.is_set():
                await self.heartbeat()

    def _forget_lease(self, lease: str) -> None:
        self._beat_every.pop(lease, None)
        self._renewed_at.pop(lease, None)

    def _done(self, job: RemoteJob) -> None:
        self.held.pop(job.id, None)

    # -- outcomes -------------------------------------------------------------------

    async def complete(self, job: RemoteJob, result: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"lease": job.lease, "result": result}
        if job._progress is not None:
            done, total, message = job._progress
            body["progress"] = {"done": done, "total": total, "message": message}
        return await self._outcome(job, "complete", body)

    async def fail(self, job: RemoteJob, error: str, *, permanent: bool = False) -> dict[str, Any]:
        return await self._outcome(
            job, "fail", {"lease": job.lease, "error": error[:10_000], "permanent": permanent}
        )

    async def snooze(
        self, job: RemoteJob, seconds: float, message: str = "", details: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Sleep ``seconds`` (or what the job's type decides from ``details``), the
        attempt given back."""
        body = {"lease": job.lease, "seconds": seconds, "message": message, "details": details or {}}
        return await self._outcome(job, "snooze", body)

    async def _outcome(self, job: RemoteJob, what: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = await self._post(f"{job.id}/{what}", body)
        except JobLost as lost:
            self._done(job)
            job.lose(str(lost.lost.get("reason", "")))
            raise
        except ControlPlaneError:
            # Not known to have arrived: no more beats for it, so that its lease lapses
            # and the reaper takes it back for another attempt (had it arrived, the job
            # has ended and nothing is taken back). Beating on would hold it until its
            # time limit failed it.
            self._done(job)
            raise
        self._done(job)
        return answer["job"]

    async def release(self, jobs: list[RemoteJob]) -> int:
        """Hand back jobs this worker will not finish (it is stopping); how many went back."""
        released = 0
        for lease in {job.lease for job in jobs}:
            ids = [job.id for job in jobs if job.lease == lease]
            answer = await self._post("release", {"lease": lease, "jobs": ids})
            released += int(answer["released"])
        for job in jobs:
            self._done(job)
        return released

    async def close(self) -> None:
        await self._client.aclose()
