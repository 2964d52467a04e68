"""System checks for where and as whom hooks run (``manage.py check``)."""

from __future__ import annotations

import os
import pwd
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register


@register(Tags.security)
def check_hook_namespace(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Hook pods never share Conveyor's namespace: there they would be next to its
    pods, Services and Secrets, under its NetworkPolicies rather than the hooks' own."""
    from ingest import conf

    if conf.get("HOOK_RUNNER") != "kubernetes":
        return []
    errors: list[CheckMessage] = []
    hooks, app = conf.get("KUBE_NAMESPACE"), conf.get("APP_NAMESPACE")
    if not hooks or hooks == app:
        errors.append(
            Error(
                f"INGEST_KUBE_NAMESPACE={hooks!r} is the namespace Conveyor runs in"
                if hooks
                else "INGEST_KUBE_NAMESPACE is empty",
                hint="Run hooks in a namespace of their own (conveyor-hooks) that enforces the "
                "restricted Pod Security Standard and denies traffic by default (deploy/).",
                id="ingest.E101",
            )
        )
    try:
        uid = int(conf.get("KUBE_RUN_AS_USER"))
    except (TypeError, ValueError):
        uid = 0
    if uid <= 0:
        errors.append(
            Error(
                f"INGEST_KUBE_RUN_AS_USER={conf.get('KUBE_RUN_AS_USER')!r}: hook "
                "pods run as a user id above 0",
                hint="The default, 65534, is nobody.",
                id="ingest.E102",
            )
        )
    return errors


@register(Tags.security)
def check_local_hook_user(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A root worker runs local hooks as ``INGEST_HOOK_USER``: that user must exist and
    not be root, and without one the hooks would run as root."""
    from ingest import conf

    if conf.get("HOOK_RUNNER") != "local" or os.geteuid() != 0:
        return []
    user = conf.get("HOOK_USER")
    if not user:
        return [
            Warning(
                "INGEST_HOOK_USER is empty and this process is root: local hooks would run as root",
                hint="Set INGEST_HOOK_USER (default nobody).",
                id="ingest.W101",
            )
        ]
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return [
            Error(
                f"INGEST_HOOK_USER={user!r}: no such user",
                id="ingest.E103",
                hint="Name an unprivileged user of this host (nobody).",
            )
        ]
    if uid == 0:
        return [
            Error(
                f"INGEST_HOOK_USER={user!r} is root",
                id="ingest.E103",
                hint="Name an unprivileged user of this host (nobody).",
            )
        ]
    return []
