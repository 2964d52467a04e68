"""Settings for the test suite: the real settings plus the test job types.

Subprocesses started by system tests use this module too, so they know the same
handlers as the test process.
"""

import os
import tempfile
from pathlib import Path

# Tests run with the development secret; production refuses to start without one.
os.environ.setdefault("CONVEYOR_ALLOW_DEV_SECRET", "1")
os.environ.setdefault("JOBS_HANDLER_MODULES", "tests.support.handlers,tests.support.ingest.plugins")

from project import settings as _base  # noqa: E402
from project.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# Rates no test reaches: other tests send hundreds of requests per user and address, and
# some send wrong tokens on purpose. The throttle tests set their own rates.
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": dict.fromkeys(THROTTLE_RATES, "100000/s"),  # noqa: F405
}

# This test run's own throttle counts (its subprocesses inherit the name): never those of
# another run or of the development server.
os.environ.setdefault("CONVEYOR_TEST_CACHE", f"conveyor-test-cache-{os.getpid()}")
CACHES = {"default": {**CACHES["default"], "KEY_PREFIX": os.environ["CONVEYOR_TEST_CACHE"]}}  # noqa: F405
if CACHES["default"]["BACKEND"].endswith("FileBasedCache"):
    CACHES["default"]["LOCATION"] = str(Path(tempfile.gettempdir()) / os.environ["CONVEYOR_TEST_CACHE"])

# This test run's own snapshot files (its subprocesses inherit the place): never the
# checkout's var/exports, whose tenant and snapshot folders a development database
# numbers the same way, and which finishing a snapshot cleans.
os.environ.setdefault(
    "EXPORTS_STORAGE_URL", str(Path(tempfile.gettempdir()) / f"{os.environ['CONVEYOR_TEST_CACHE']}-exports")
)
EXPORTS_STORAGE_URL = os.environ["EXPORTS_STORAGE_URL"]

# Local hooks run as the test run's own user. Running as root, the runner would switch
# them to "nobody", who may not reach this checkout's interpreter (a pyenv Python under a
# private /root); tests/ingest/test_local_runner.py switches users explicitly.
INGEST_HOOK_USER = ""
# ... which the system check warns about when the tests run as root: knowingly, here.
SILENCED_SYSTEM_CHECKS = ["ingest.W101"]

# The development tools' app (manage.py demo), which the settings install with DEBUG only:
# the tests run from the checkout, without DEBUG, and test it too.
if "devtools" not in _base.INSTALLED_APPS:
    INSTALLED_APPS = [*_base.INSTALLED_APPS, "devtools"]
