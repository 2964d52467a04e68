"""The engine's public API (``import jobs``) and how it is wired: names that import while
Django loads its apps, and are the engine's own objects once read. The import rules
themselves (no cycles in ``jobs``, the console or a pipeline, the core's layers, a core
that imports none of its commands, pipelines that use only the public packages of the
engine and the console) are import-linter contracts, checked by ``tests/test_project.py``;
here, that the core's contract names every module of the core, and that the pipelines
import only the names the console's public packages list."""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import console.admin
import console.api
import console.cli
import jobs
from jobs import engine, events, pipelines, sql, why, worker

ROOT = Path(__file__).resolve().parent.parent

# The names whose modules need no model: they may be read before the apps are loaded.
BEFORE_APPS = {
    "ApiPayload",
    "AppSettings",
    "Backoff",
    "ControlPlaneError",
    "JobLost",
    "RemoteClient",
    "RemoteJob",
    "Cron",
    "Enqueued",
    "Exponential",
    "Fibonacci",
    "Fixed",
    "Handler",
    "IllegalTransition",
    "InvalidArgument",
    "InvalidPayload",
    "JobContext",
    "LeaseLost",
    "PermanentError",
    "Prerequisite",
    "Schedule",
    "Snooze",
    "TenantObject",
    "TransientError",
    "UnknownJobType",
    "handler",
    "now",
    "redact_secrets",
    "storable_json",
    "without_traceback",
}

IMPORT_ALONE = """
import json, sys
before = set(sys.modules)
import jobs
print(json.dumps({"loaded": sorted(set(sys.modules) - before), "dir": dir(jobs)}))
"""

BEFORE_APPS_LOAD = """
import json, sys
import django.apps, django.conf
django.conf.settings.INSTALLED_APPS  # settings read, apps not loaded: as when Django imports jobs
asked = []
for check in ("check_apps_ready", "check_models_ready"):
    real = getattr(django.apps.apps, check)
    setattr(django.apps.apps, check, lambda real=real, check=check: asked.append(check) or real())
import jobs
loaded = sorted(m for m in sys.modules if m.startswith("jobs."))
read = {name: repr(getattr(jobs, name)) for name in sys.argv[1:]}
print(json.dumps({"loaded": loaded, "asked": asked, "read": sorted(read),
                  "models": "jobs.models" in sys.modules}))
"""


def _python(code: str, *args: str, settings: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    if settings:
        env["DJANGO_SETTINGS_MODULE"] = "project.test_settings"
    result = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_import_jobs_imports_nothing_but_itself_and_lists_the_public_names():
    """Without Django set up at all: nothing of the engine, nothing of Django."""
    report = _python(IMPORT_ALONE, settings=False)
    assert [m for m in report["loaded"] if m.startswith(("jobs", "django"))] == ["jobs"]
    assert set(jobs.__all__) <= set(report["dir"])


def test_import_jobs_works_before_the_apps_are_loaded_and_reads_no_model():
    """As Django imports it, settings read and apps not loaded: the names of modules
    without models can be read then too, and the registry is never asked for."""
    report = _python(BEFORE_APPS_LOAD, *sorted(BEFORE_APPS))
    assert report["read"] == sorted(BEFORE_APPS)
    assert report["asked"] == []
    assert report["models"] is False
    assert not {"jobs.engine", "jobs.events", "jobs.why", "jobs.pipelines", "jobs.worker"} & set(
        report["loaded"]
    )


def test_the_public_api_names_every_documented_name():
    assert sorted(jobs.__all__) == sorted(
        [
            "handler",
            "Handler",
            "History",
            "Cron",
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
            "AppSettings",
            "now",
            "run_until_idle",
            "busy_pipelines",
            "pipeline_jobs",
            "pipeline_state",
            "pipelines_over",
            "execute_prepared",
            "redact_secrets",
            "register_collector",
            "remote_handler",
            "RemoteHooks",
            "RemoteClient",
            "RemoteJob",
            "JobLost",
            "ControlPlaneError",
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
        ("pipeline_state", pipelines.state_of),
        ("live_workers", why.live_worker_count),
        ("run_until_idle", worker.run_until_idle),
        ("wake", engine.wake),
    ],
)
def test_each_public_function_is_the_engine_function_itself(name, target):
    assert getattr(jobs, name) is target
    assert vars(jobs)[name] is target  # kept: the next read is a plain attribute


def test_type_checkers_see_the_objects_that_run_time_imports():
    """The imports under TYPE_CHECKING in jobs/__init__.py name, for each public name,
    the module and name that ``jobs.__getattr__`` imports."""
    tree = ast.parse((ROOT / "jobs" / "__init__.py").read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    )
    imported = {
        alias.asname or alias.name: (node.module, alias.name)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    imported.pop("Job")  # for annotations only
    assert imported == jobs._SOURCES
    assert sorted(jobs.__all__) == sorted(jobs._SOURCES)
    for name, (module, attribute) in jobs._SOURCES.items():
        assert getattr(jobs, name) is getattr(importlib.import_module(module), attribute)


def test_a_name_that_is_not_public_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Job'"):
        jobs.Job  # noqa: B018
    assert not hasattr(jobs, "enqueu")


def test_dir_lists_the_public_names():
    assert set(jobs.__all__) <= set(dir(jobs))


# The modules of jobs that are not its core: its commands.
SURFACES = {"jobs.management"}


def test_every_module_of_jobs_is_core_or_a_surface():
    """A new module of jobs lands in the core's import-linter contract (its source
    modules) or among the surfaces: a core module missing from the contract would be
    free to import a surface without the contract noticing."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    core = next(
        c for c in contracts["contracts"] if c["name"] == "The engine's core imports none of its commands"
    )
    modules = {f"jobs.{m.name}" for m in pkgutil.iter_modules([str(ROOT / "jobs")])}
    assert set(core["forbidden_modules"]) == SURFACES
    assert modules - SURFACES == set(core["source_modules"])


PIPELINES = ["factors", "ingest", "market", "exports"]


def test_pipelines_import_only_the_names_the_consoles_public_packages_list():
    """import-linter holds the pipelines to ``console.admin``, ``console.api`` and
    ``console.cli``; their ``__all__`` says which of the names defined there are the
    console's to offer."""
    public = {
        "console.admin": set(console.admin.__all__),
        "console.api": set(console.api.__all__),
        "console.cli": set(console.cli.__all__),
    }
    imported = {
        (node.module, alias.name)
        for app in PIPELINES
        for path in (ROOT / app).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module in public
        for alias in node.names
    }
    assert imported, "the pipelines build on the console's pieces"
    assert {(module, name) for module, name in imported if name not in public[module]} == set()
    for module, names in public.items():
        assert all(hasattr(importlib.import_module(module), name) for name in names)
