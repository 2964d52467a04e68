"""What of a job's error a reader sees: staff get the whole text, members the message.

The worker stores an unexpected exception as ``"Type: message"`` followed by the last
frames of its traceback (``jobs.worker._describe``), and the failure's history event
repeats that text. A traceback names server paths and code: it helps the staff who run
the platform and tells a tenant's members nothing they need, so every surface that
shows a job error or event message to a user (the API, the live streams) passes it
through ``error_text_for``.

Text that code outside Conveyor wrote (a hook's log, which tenants read) may carry this
process's secrets, printed by mistake or on purpose: ``redact_secrets`` takes out the
values of the secret settings and environment variables, and the credentials of any URL,
before such text is stored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

# Each frame of traceback.format_tb() starts with this line.
_FRAME = re.compile(r'^  File "', re.MULTILINE)

REDACTED = "[redacted]"
# A name holding one of these words holds a secret (SECRET_KEY, METRICS_TOKEN,
# EXPORTS_TRINO_PASSWORD, AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS).
SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
# Shorter values are not taken out when found by name: "true" or a port number would
# mangle every log that mentions them. A URL's or a database's password is taken out
# from this length on.
MIN_SECRET_CHARS = 8
MIN_PASSWORD_CHARS = 4
# Settings whose last word is not a secret word and that hold secrets all the same.
SECRET_SETTINGS = frozenset({"SECRET_KEY_FALLBACKS"})
# user:password@ in a URL's authority: the password goes, whatever it is.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s/@:]*):[^\s/@]+@")


def without_traceback(text: str) -> str:
    """``text`` up to its first traceback frame: the exception's type and message."""
    frame = _FRAME.search(text)
    return text if frame is None else text[: frame.start()].rstrip("\n")


def sees_tracebacks(user: Any) -> bool:
    """Whether ``user`` is shown tracebacks: staff only (no user: nobody)."""
    return bool(getattr(user, "is_staff", False))


def error_text_for(user: Any, text: str) -> str:
    """``text`` as ``user`` may read it: whole for staff, without its traceback else."""
    return text if sees_tracebacks(user) else without_traceback(text)


def redact_secrets(text: str, environment: Mapping[str, Any] | None = None) -> str:
    """``text`` without this process's secrets: the values of settings and environment
    variables whose names say they are secret (SECRET_KEY, tokens, passwords, keys,
    credentials), database and URL passwords, and the password of any URL it holds.
    ``environment`` is the environment of the process that wrote ``text`` (a hook's, set
    by its catalogue entry, which its tenant is not shown): its secret-named values and
    URL passwords go too."""
    found = _secrets()
    if environment:
        found.update(
            _named_secrets(((name, str(value)) for name, value in environment.items()), contains=True)
        )
    for secret in sorted(found, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)


def _secrets() -> set[str]:
    # Read at each call, not cached: a value set after start-up (a test's override, a
    # rotated token) is taken out too, and a few hundred names cost microseconds.
    found = set(_named_secrets(os.environ.items(), contains=True))
    for name in dir(settings):
        if name.isupper():
            found.update(_setting_secrets(name, getattr(settings, name, None), depth=0))
    return found


def _named_secrets(items: Iterable[tuple[str, Any]], *, contains: bool) -> Iterator[str]:
    """Secret values among ``items`` (name, value): by name, and URL passwords. An
    environment variable is secret when its name contains a secret word; a setting or
    one of its keys when its last word is one (SECRET_KEY is, KEY_PREFIX and
    PASSWORD_HASHERS are not)."""
    for name, value in items:
        if not isinstance(value, str):
            continue
        yield from _url_password(value)
        if _secret_name(str(name), contains=contains) and len(value) >= MIN_SECRET_CHARS:
            yield value


def _secret_name(name: str, *, contains: bool) -> bool:
    upper = name.upper()
    if contains:
        return any(word in upper for word in SECRET_WORDS)
    return upper in SECRET_SETTINGS or re.split(r"[_\-.]", upper)[-1].startswith(SECRET_WORDS)


def _setting_secrets(name: str, value: Any, *, depth: int) -> Iterator[str]:
    """Secrets in one setting, looking into its dicts and lists (DATABASES, CACHES,
    storage options) a few levels deep."""
    if depth > 4:
        return
    if isinstance(value, str):
        yield from _named_secrets([(name, value)], contains=False)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if str(key).upper() == "PASSWORD" and isinstance(item, str) and len(item) >= MIN_PASSWORD_CHARS:
                yield item
            yield from _setting_secrets(str(key), item, depth=depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            # SECRET_KEY_FALLBACKS: each item is as secret as the list's name says.
            yield from _setting_secrets(name, item, depth=depth + 1)


def _url_password(value: str) -> Iterator[str]:
    if "://" not in value or "@" not in value:
        return
    try:
        password = urlsplit(value).password
    except ValueError:
        return
    if password and len(password) >= MIN_PASSWORD_CHARS:
        yield password
