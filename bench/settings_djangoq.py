"""django-q2 alone: one django-q2 task per job, Conveyor's engine threads switched off.

``BENCH_DQ_BROKER`` picks the broker: ``orm`` (the database, polled) or ``redis``
(``BENCH_REDIS_URL``, default the local server, database 15).
"""

import os

from bench.settings import *  # noqa: F403
from project.settings import env_int  # noqa: E402

JOBS_RUN_IN_CLUSTER = False

_broker = os.environ.get("BENCH_DQ_BROKER", "orm")
Q_CLUSTER = {
    # A name of its own: the Redis list (and ORM key) other runs on this server don't share.
    "name": os.environ.get("BENCH_DQ_NAME", f"bench-{_broker}"),
    "workers": env_int("JOBS_WORKERS", 2),
    "timeout": 60,
    "retry": 120,
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    # Keep every success: the drain is counted from the stored results.
    "save_limit": 0,
    # django-q2 restarts a worker process every 500 tasks by default; at these rates that
    # is a Django start-up every few seconds, so the bench lets workers live.
    "recycle": 100_000,
    **(
        {"redis": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")}
        if _broker == "redis"
        else {"orm": "default"}  # django-q2's default poll (0.2 s)
    ),
}
