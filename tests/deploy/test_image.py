"""The container image's rules, read from the Dockerfile (no registry can be reached here
to build it): two stages, compilers only in the first, a non-root user, the static files
collected, a health check on the web process's probe, and commands that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
