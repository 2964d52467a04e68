"""Hook runners: where a source's hooks run (``base`` says the contract).

``current()`` is the runner the settings name: local processes (the default, with no
cluster) or Kubernetes Jobs. It is built once per process and configuration.
"""

from __future__ import annotations

import functools

from django.core.exceptions import ImproperlyConfigured

from ingest import conf
from ingest.runs.runners.base import HookRunner, HookSpec, HookStatus, Phase, Resources

__all__ = ["HookRunner", "HookSpec", "HookStatus", "Phase", "Resources", "current"]

KINDS = ("local", "kubernetes")


def current() -> HookRunner:
    kind = conf.get("HOOK_RUNNER")
    if kind not in KINDS:
        raise ImproperlyConfigured(f"INGEST_HOOK_RUNNER={kind!r}: must be one of {', '.join(KINDS)}")
    settings = tuple(
        conf.get(name)
        for name in (
            "KUBECONFIG",
            "KUBE_CONTEXT",
            "KUBE_NAMESPACE",
            "KUBE_SCHEDULE_TIMEOUT_SECONDS",
            "KUBE_TTL_SECONDS_AFTER_FINISHED",
            "KUBE_REQUEST_TIMEOUT_SECONDS",
            "KUBE_SERVICE_ACCOUNT",
            "KUBE_RUN_AS_USER",
            "KUBE_SCRATCH_LIMIT",
            "HOOK_LOG_TAIL_CHARS",
            "HOOK_PATH",
            "HOOK_USER",
            "HOOK_MAX_FILE_BYTES",
            "HOOK_MAX_OPEN_FILES",
            "HOOK_MAX_PROCESSES",
        )
    )
    return _build(kind, settings)


@functools.lru_cache(maxsize=4)
def _build(kind: str, settings: tuple) -> HookRunner:
    if kind == "kubernetes":
        from ingest.runs.runners.kubernetes import KubernetesRunner  # the client loads only here

        return KubernetesRunner.from_settings()
    from ingest.runs.runners.local import Limits, LocalRunner

    return LocalRunner(
        log_tail_chars=int(conf.get("HOOK_LOG_TAIL_CHARS")),
        path=str(conf.get("HOOK_PATH")),
        user=str(conf.get("HOOK_USER") or ""),
        limits=Limits(
            max_file_bytes=int(conf.get("HOOK_MAX_FILE_BYTES")),
            max_open_files=int(conf.get("HOOK_MAX_OPEN_FILES")),
            max_processes=int(conf.get("HOOK_MAX_PROCESSES")),
        ),
    )
