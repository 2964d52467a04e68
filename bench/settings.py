"""Conveyor's settings pointed at a bench scratch database (``BENCH_DB_NAME``).

Same server as the project (the embedded PostgreSQL, or ``DATABASE_URL``); only the
database name differs, so a bench run never touches the project's data.
"""

import os

os.environ.setdefault("CONVEYOR_ALLOW_DEV_SECRET", "1")
os.environ.setdefault("JOBS_HANDLER_MODULES", "bench.handlers")

from project.settings import *  # noqa: E402,F403
from project.settings import DATABASES  # noqa: E402

if os.environ.get("BENCH_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["BENCH_DB_NAME"]

# django-q2 logs every enqueue at INFO under "django-q"; the bench prints its own figures.
LOGGING["loggers"]["django-q"] = {"level": "WARNING"}  # noqa: F405

# Experiments: engine knobs from the environment (unset: the engine's defaults).
for _knob in ("CLAIM_BATCH", "GROUP_COMMIT_SECONDS", "GROUP_COMMIT_JOBS"):
    if os.environ.get(f"BENCH_JOBS_{_knob}"):
        globals()[f"JOBS_{_knob}"] = float(os.environ[f"BENCH_JOBS_{_knob}"])
