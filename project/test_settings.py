"""Settings for the test suite: the real settings plus the test job types.

Subprocesses started by system tests use this module too, so they know the same
handlers as the test process.
"""

import os

# Tests run with the development secret; production refuses to start without one.
os.environ.setdefault("CONVEYOR_ALLOW_DEV_SECRET", "1")
os.environ.setdefault("JOBS_HANDLER_MODULES", "tests.handlers")

from project.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
