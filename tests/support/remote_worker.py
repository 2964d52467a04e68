"""A remote worker as a real process, for the tests: it claims jobs over the internal API
with ``jobs.remote_client`` (no Django, no database), works on each for the seconds its
payload names while its leases are kept, and completes it, unless the engine takes the
job away meanwhile. It prints one line per step, flushed, for the test to follow:

    claimed <id> <attempt>
    lost <id> <reason>
    done <id>

    python -m tests.support.remote_worker URL TOKEN NAME [--jobs N] [--wait SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from jobs.remote_client import JobLost, RemoteClient, RemoteJob


def say(*words: object) -> None:
    print(*words, flush=True)


async def work(client: RemoteClient, job: RemoteJob) -> None:
    say("claimed", job.id, job.attempt)
    seconds = float(job.payload.get("seconds", 0))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(job.lost.wait(), timeout=seconds)
    if job.lost.is_set():
        say("lost", job.id, job.lost_reason)
        return
    try:
        await client.complete(job, result={"by": client.worker})
    except JobLost as lost:
        say("lost", job.id, lost.lost.get("reason"))
        return
    say("done", job.id)


async def main(url: str, token: str, name: str, jobs: int, wait: float) -> None:
    client = RemoteClient(url, token, worker=name, timeout=10)
    stop = asyncio.Event()
    keeper = asyncio.create_task(client.keep_leases(stop))
    handled = 0
    deadline = asyncio.get_running_loop().time() + wait
    try:
        while handled < jobs and asyncio.get_running_loop().time() < deadline:
            claim = await client.claim(limit=1)
            if not claim.jobs:
                await asyncio.sleep(0.1)
                continue
            for job in claim.jobs:
                await work(client, job)
                handled += 1
    finally:
        stop.set()
        await keeper
        await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("name")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--wait", type=float, default=30.0)
    options = parser.parse_args()
    asyncio.run(main(options.url, options.token, options.name, options.jobs, options.wait))
