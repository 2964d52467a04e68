"""project/settings.py reads each environment variable on a line of its own, under the
setting's own name, with the default the app's conf.py declares for it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "project" / "settings.py"
READERS = {"env_bool", "env_int", "env_float", "env_list", "env_rate", "env_json_object"}

# Each app's settings, with its default as the settings module gives it and as its
# conf.py declares it, in a process whose environment sets none of them.
DEFAULTS = """
import importlib, json
import django
django.setup()
found = {}
for module in ("jobs.conf", "intake.conf", "factors.conf", "ingest.conf", "market.conf", "exports.conf"):
    for setting in importlib.import_module(module).SETTINGS.declared().values():
        found[setting.name] = [repr(setting()), repr(setting.convert(setting.default))]
print(json.dumps(found))
"""
# Where settings knowingly give another default than the app's own: file sources need a
# root to read from, and a checkout has one under var/ (an app without settings has none).
OTHER_DEFAULTS = {"INGEST_FILE_ROOTS"}


def _environment_read_by_name() -> list[ast.Call]:
    """The calls in the settings that read an environment variable (but in the readers
    themselves)."""
    tree = ast.parse(SETTINGS.read_text())
    readers = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in READERS]
    inside_readers = {id(node) for reader in readers for node in ast.walk(reader)}
    calls = []
    for node in ast.walk(tree):
        if id(node) in inside_readers:
            continue
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id in READERS:
            calls.append(node)
        elif isinstance(function, ast.Attribute) and ast.unparse(function) == "os.environ.get":
            calls.append(node)
    return calls


def test_the_settings_assign_no_name_they_build():
    """Every setting is an assignment ``grep NAME =`` finds, never ``globals()[...]``."""
    assert "globals()" not in SETTINGS.read_text()


def test_each_environment_variable_is_named_where_it_is_read():
    reads = _environment_read_by_name()
    assert len(reads) > 80
    computed = [ast.unparse(call) for call in reads if not isinstance(call.args[0], ast.Constant)]
    assert computed == []


def test_an_unset_variable_gives_the_default_its_app_declares():
    prefixes = ("JOBS_", "FACTORS_", "INGEST_", "EXPORTS_", "INTAKE_", "DIRECT_EXPORT", "POD_NAMESPACE")
    env = {key: value for key, value in os.environ.items() if not key.startswith(prefixes)}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", CONVEYOR_ALLOW_DEV_SECRET="1")
    result = subprocess.run(
        [sys.executable, "-c", DEFAULTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    differing = {name: values for name, values in found.items() if values[0] != values[1]}
    assert set(differing) == OTHER_DEFAULTS, differing
