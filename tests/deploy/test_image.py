"""The container image's rules, read from the Dockerfile (no registry can be reached here
to build it): two stages, compilers only in the first, a non-root user, the static files
collected, a health check on the web process's probe, and commands that exist. And what
it leaves out: the development tools (devtools/: the dev server, the embedded database,
the fakes, the demo), which the product imports only where DATABASE_URL is unset; the
product, copied as the image copies it, runs without them."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> list[str]:
    return re.split(r"^FROM ", DOCKERFILE, flags=re.MULTILINE)[1:]


def test_two_stages_and_no_compiler_in_the_final_one():
    build, final = stages()
    assert "AS build" in build.splitlines()[0] and "build-essential" in build
    assert not re.search(r"build-essential|gcc|apt-get install", final)
    assert "COPY --from=build /opt/venv /opt/venv" in final


def test_the_final_stage_runs_as_a_non_root_user_with_a_health_check():
    final = stages()[-1]
    users = re.findall(r"^USER (\S+)", final, flags=re.MULTILINE)
    assert users and not users[-1].startswith(("root", "0"))
    assert "collectstatic --noinput" in final
    assert re.search(r"^HEALTHCHECK .*\n.*?/health", final, flags=re.MULTILINE)
    assert re.search(r'^CMD \["python", "-m", "project.web"', final, flags=re.MULTILINE)


def test_every_package_the_app_needs_is_copied():
    packages = set(
        re.findall(r"^include = \[(.*)\]", (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)[0]
        .replace('"', "")
        .replace("*", "")
        .split(", ")
    )
    copied = set(re.findall(r"^COPY (?:--chown=\S+ )?(\w+) \1$", stages()[-1], flags=re.MULTILINE))
    assert packages <= copied, packages - copied


def test_the_commands_the_image_names_exist():
    names = set(re.findall(r"manage\.py (\w+)", DOCKERFILE))
    assert {"qcluster", "export_worker", "migrate", "collectstatic"} <= names
    listed = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "help", "--commands"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "CONVEYOR_ALLOW_DEV_SECRET": "1"},
    ).stdout.split()
    assert names <= set(listed), names - set(listed)


# --- what the image leaves out: the development tools ------------------------------------

PRODUCT = [
    "project",
    "appsettings",
    "jobs",
    "console",
    "tenancy",
    "intake",
    "factors",
    "ingest",
    "market",
    "exports",
]
DEVELOPMENT = {"devtools", "tests", "bench"}


def copied(stage: str) -> list[str]:
    """The checkout's paths a stage copies (``COPY [--chown=…] SOURCE… DEST``; not what
    it copies ``--from`` another stage)."""
    sources = []
    for line in re.findall(r"^COPY (.*)$", stage, flags=re.MULTILINE):
        if "--from=" in line:
            continue
        words = [word for word in line.split() if not word.startswith("--")]
        sources += words[:-1]
    return sources


def test_no_stage_copies_the_development_tools_and_the_wheel_leaves_them_out():
    from setuptools import find_packages

    for stage in stages():
        assert not {path.rstrip("/").split("/")[0] for path in copied(stage)} & DEVELOPMENT, stage
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(ROOT), include=found["include"], exclude=found.get("exclude", ()))
    assert {package.split(".")[0] for package in packages} == set(PRODUCT)


def test_the_product_holds_no_fake():
    """The fakes of Trino, the market-data API and Kubernetes are devtools' alone."""
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            assert not path.name.startswith("fake"), path
            assert not re.search(r"^class Fake", path.read_text(), flags=re.MULTILINE), path
            assert not re.search(r"^\s*(import|from) duckdb\b", path.read_text(), flags=re.MULTILINE), path


def devtools_imports(path: Path) -> list[tuple[str, bool]]:
    """``(module, inside a function)`` for each import of devtools in ``path``."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(
                    (alias.name, in_function) for alias in child.names if alias.name.startswith("devtools")
                )
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith("devtools"):
                found.extend((f"{child.module}.{alias.name}", in_function) for alias in child.names)
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(ast.parse(path.read_text()), False)
    return found


def test_the_product_imports_only_the_embedded_database_and_only_inside_functions():
    """Where DATABASE_URL is unset, in a checkout: the settings name the embedded server,
    manage.py and the web process start it. Nothing else of the product reaches devtools,
    and these imports run only when called (the import-linter contract in pyproject.toml
    lists the same ones)."""
    imports = {
        str(path.relative_to(ROOT)): devtools_imports(path)
        for path in [ROOT / "manage.py", *(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))]
    }
    assert {path: found for path, found in imports.items() if found} == {
        "manage.py": [("devtools.embedded_db", True)],
        "project/settings.py": [("devtools.embedded_db", True)],
        "project/web.py": [("devtools.embedded_db", True)],
    }
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (devtools,) = [c for c in contracts if c.get("forbidden_modules") == ["devtools"]]
    assert set(devtools["source_modules"]) == set(PRODUCT)
    assert set(devtools["ignore_imports"]) == {
        "project.settings -> devtools.embedded_db",
        "project.web -> devtools.embedded_db",
    }


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the final stage copies from the checkout, laid out as in /app."""
    app = tmp_path_factory.mktemp("app")
    for source in copied(stages()[-1]):
        path = ROOT / source
        if path.is_dir():
            shutil.copytree(path, app / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, app / source)
    return app


def in_image(app: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` run in ``app`` as the image runs it: no checkout on the path, and
    none of the test run's environment (its test job types are the checkout's)."""
    clean = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    clean.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        CONVEYOR_VAR_DIR=str(app / "var"),
        CONVEYOR_ALLOW_DEV_SECRET="1",
        **env,
    )
    return subprocess.run(
        [sys.executable, *args], cwd=app, env=clean, capture_output=True, text=True, timeout=120
    )


PROBE = """
import importlib.util, json, sys, django
from django.conf import settings
django.setup()
from django.db import connection
refusal = None
if sys.argv[1:] == ["connect"]:
    try:
        connection.ensure_connection()
    except Exception as error:
        refusal = f"{type(error).__name__}: {error}"
print(json.dumps({"devtools": importlib.util.find_spec("devtools") is not None,
                  "apps": settings.INSTALLED_APPS, "engine": settings.DATABASES["default"]["ENGINE"],
                  "embedded": settings.EMBEDDED_POSTGRES_DIR is not None, "refusal": refusal}))
"""


def test_without_the_development_tools_settings_load_and_the_database_asks_for_database_url(image_tree):
    """An export worker runs without DATABASE_URL, and the image's build collects its
    static files so: both only load the settings. Whatever needs the database is told
    what to set, even with DEBUG on."""
    found = json.loads(in_image(image_tree, "-c", PROBE, "connect", DEBUG="true").stdout)

    assert found["devtools"] is False, "devtools is importable outside the checkout"
    assert "devtools" not in found["apps"] and found["embedded"] is False
    assert found["engine"] == "project.no_database"
    assert found["refusal"].startswith("ImproperlyConfigured: DATABASE_URL is unset")
    migrate = in_image(image_tree, "manage.py", "migrate", "--noinput")
    assert migrate.returncode != 0 and "set DATABASE_URL" in migrate.stderr, migrate.stderr
    static = in_image(image_tree, "manage.py", "collectstatic", "--noinput", "-v", "0")
    assert static.returncode == 0, static.stderr


def test_with_database_url_the_image_uses_it_and_has_no_demo_even_with_debug(image_tree):
    url = "postgresql://conveyor@postgres.invalid:5432/conveyor"

    found = json.loads(in_image(image_tree, "-c", PROBE, DATABASE_URL=url, DEBUG="true").stdout)

    assert found["engine"] == "django.db.backends.postgresql" and "devtools" not in found["apps"]
    listed = in_image(image_tree, "manage.py", "help", "--commands", DATABASE_URL=url, DEBUG="true")
    assert listed.returncode == 0, listed.stderr
    assert "export_worker" in listed.stdout.split() and "demo" not in listed.stdout.split()
