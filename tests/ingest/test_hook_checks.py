"""The system checks that keep hooks out of Conveyor's own namespace and off root."""

from __future__ import annotations

import os

import pytest

from ingest.runs.runners.checks import check_hook_namespace, check_local_hook_user


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_hooks_in_conveyors_own_namespace_are_an_error(settings):
    settings.INGEST_HOOK_RUNNER = "kubernetes"
    settings.INGEST_APP_NAMESPACE = "conveyor"
    settings.INGEST_KUBE_NAMESPACE = "conveyor"
    assert ids(check_hook_namespace()) == ["ingest.E101"]
    settings.INGEST_KUBE_NAMESPACE = "conveyor-hooks"
    assert check_hook_namespace() == []


def test_hook_pods_as_root_are_an_error(settings):
    settings.INGEST_HOOK_RUNNER = "kubernetes"
    settings.INGEST_KUBE_RUN_AS_USER = 0
    assert ids(check_hook_namespace()) == ["ingest.E102"]


def test_the_namespace_checks_apply_to_the_kubernetes_runner_only(settings):
    settings.INGEST_HOOK_RUNNER = "local"
    settings.INGEST_APP_NAMESPACE = settings.INGEST_KUBE_NAMESPACE = "conveyor"
    assert check_hook_namespace() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the hook user matters to a root worker only")
def test_a_root_worker_needs_an_unprivileged_hook_user(settings):
    settings.INGEST_HOOK_RUNNER = "local"
    settings.INGEST_HOOK_USER = ""
    assert ids(check_local_hook_user()) == ["ingest.W101"]
    settings.INGEST_HOOK_USER = "root"
    assert ids(check_local_hook_user()) == ["ingest.E103"]
    settings.INGEST_HOOK_USER = "no-such-user-here"
    assert ids(check_local_hook_user()) == ["ingest.E103"]
    settings.INGEST_HOOK_USER = "nobody"
    assert check_local_hook_user() == []
