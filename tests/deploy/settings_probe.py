"""Run with a container's environment: load Conveyor's settings (and, for a management
command, build its argument parser, whose defaults may read the environment too) and
print, as JSON, which environment variables were read and what the settings became.

    python tests/deploy/settings_probe.py [COMMAND ARG...]

A separate process, since settings are read once per process and each container of the
manifests has an environment of its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class RecordingEnviron(dict):
    """``os.environ`` that remembers every name asked about, set or not."""

    read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)

    def setdefault(self, key, default=None):
        self.read.add(key)
        return super().setdefault(key, default)


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    # Replaced, not cleared: the process starts with the container's environment only.
    os.environ = RecordingEnviron(os.environ)  # noqa: B003 (os.getenv reads this name too)
    import django
    from django.conf import settings
    from django.http.request import validate_host

    django.setup()
    if argv:
        from django.core.management import get_commands, load_command_class

        name, *args = argv
        command = load_command_class(get_commands()[name], name)
        command.create_parser("manage.py", name).parse_args(args)
    figures = {
        "DEBUG": settings.DEBUG,
        "embedded_database": settings.EMBEDDED_POSTGRES_DIR is not None,
        "database_host": settings.DATABASES["default"].get("HOST"),
        "redis": bool(settings.REDIS_URL),
        "development_secret": "development-only" in settings.SECRET_KEY,
        "STATIC_ROOT": str(settings.STATIC_ROOT),
        "HTTPS_ONLY": settings.HTTPS_ONLY,
        "redirect_exempt": list(settings.SECURE_REDIRECT_EXEMPT),
        "service_host_allowed": validate_host("conveyor-web", settings.ALLOWED_HOSTS),
        "hook_runner": settings.INGEST_HOOK_RUNNER,
        "drain_file": getattr(settings, "JOBS_DRAIN_FILE", ""),
    }
    print(json.dumps({"read": sorted(RecordingEnviron.read), "settings": figures}))


if __name__ == "__main__":
    main(sys.argv[1:])
