"""The engine's public API (``import jobs``) and how it is wired: explicit names that
import while Django loads its apps, and functions that match the engine's. The import
rules themselves (no cycles in ``jobs``, the core's layers, a core that imports none of
the operator surfaces) are import-linter contracts, checked by ``tests/test_project.py``;
here, that the core's contract names every module of the core."""

from __future__ import annotations

import inspect
import json
import os
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import jobs
from jobs import engine, events, pipelines, public, sql, why

ROOT = Path(__file__).resolve().parent.parent

BEFORE_APPS_LOAD = """
import json, sys
import django.conf
django.conf.settings.INSTALLED_APPS  # settings read, apps not loaded: as when Django imports jobs
import jobs
print(json.dumps({"missing": [n for n in jobs.__all__ if not hasattr(jobs, n)],
                  "loaded": sorted(m for m in sys.modules if m.startswith("jobs."))}))
"""


def test_import_jobs_works_before_the_apps_are_loaded_and_reads_no_model():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.test_settings"}
    result = subprocess.run(
        [sys.executable, "-c", BEFORE_APPS_LOAD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["missing"] == []
    assert not {"jobs.models", "jobs.engine", "jobs.events", "jobs.why"} & set(report["loaded"])


def test_the_public_api_names_every_documented_name():
    assert sorted(jobs.__all__) == sorted(
        [
            "handler",
            "Handler",
            "enqueue",
            "enqueue_many",
            "enqueue_once",
            "Enqueued",
            "publish",
            "JobContext",
            "TransientError",
            "PermanentError",
            "Snooze",
            "UnknownJobType",
            "InvalidArgument",
            "InvalidPayload",
            "LeaseLost",
            "IllegalTransition",
            "Backoff",
            "Exponential",
            "Fibonacci",
            "Fixed",
            "Schedule",
            "recover",
            "retry",
            "cancel",
            "run_now",
            "explain",
            "ApiPayload",
            "TenantObject",
            "Prerequisite",
            "now",
            "run_until_idle",
            "busy_pipelines",
            "pipeline_jobs",
            "pipeline_state",
            "pipelines_over",
            "execute_prepared",
            "redact_secrets",
            "storable_json",
            "wake",
            "without_traceback",
            "live_workers",
        ]
    )
    assert jobs.Enqueued is engine.Enqueued


@pytest.mark.parametrize(
    "name, target",
    [
        ("enqueue", engine.enqueue),
        ("enqueue_once", engine.enqueue_once),
        ("enqueue_many", engine.enqueue_many),
        ("recover", engine.recover),
        ("execute_prepared", sql.execute),
        ("retry", engine.retry),
        ("cancel", engine.cancel),
        ("run_now", engine.run_now),
        ("publish", events.publish),
        ("explain", why.explain),
        ("busy_pipelines", pipelines.busy),
        ("pipeline_jobs", pipelines.jobs_of),
        ("pipelines_over", pipelines.over),
        ("wake", engine.wake),
    ],
)
def test_each_public_function_has_the_signature_of_the_one_it_calls(name, target):
    assert getattr(jobs, name) is getattr(public, name)
    assert str(inspect.signature(getattr(public, name))) == str(inspect.signature(target))


# The modules of jobs that are not its core: the operator surfaces, and the hooks through
# which Django's discovery finds them (admin autodiscovery, template tag libraries, the
# URL conf).
SURFACES = {"jobs.contrib", "jobs.streams", "jobs.management"}
HOOKS = {"jobs.admin", "jobs.templatetags", "jobs.urls"}


def test_every_module_of_jobs_is_core_or_a_surface():
    """A new module of jobs lands in the core's import-linter contract (its source
    modules) or among the surfaces: a core module missing from the contract would be
    free to import a surface without the contract noticing."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    core = next(
        c
        for c in contracts["contracts"]
        if c["name"] == "The engine's core imports none of its operator surfaces"
    )
    modules = {f"jobs.{m.name}" for m in pkgutil.iter_modules([str(ROOT / "jobs")])}
    assert set(core["forbidden_modules"]) == SURFACES
    assert modules - SURFACES - HOOKS == set(core["source_modules"])
