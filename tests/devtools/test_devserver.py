"""The development server's choice of user for local hooks when it runs as root."""

from __future__ import annotations

import os

import pytest

from devtools import devserver


def test_an_interpreter_behind_a_private_directory_is_not_reachable_by_others(tmp_path):
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    (private / "python").write_text("")
    (private / "python").chmod(0o755)
    tmp_path.chmod(0o755)

    assert not devserver._reachable_by_others(private / "python")
    private.chmod(0o711)
    searchable = all(parent.stat().st_mode & 0o001 for parent in tmp_path.resolve().parents)
    assert devserver._reachable_by_others(private / "python") == searchable
    assert not devserver._reachable_by_others(tmp_path / "missing")


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server changes the hooks' user")
def test_a_root_server_runs_hooks_as_itself_only_when_the_interpreter_is_out_of_reach(monkeypatch, capsys):
    monkeypatch.setattr(devserver, "_reachable_by_others", lambda path: False)
    env: dict[str, str] = {}
    devserver._local_hooks_user(env)
    assert env == {"INGEST_HOOK_USER": ""}
    assert "Local hooks run as root here" in capsys.readouterr().out

    chosen = {"INGEST_HOOK_USER": "conveyor-hooks"}
    devserver._local_hooks_user(chosen)
    assert chosen == {"INGEST_HOOK_USER": "conveyor-hooks"}

    monkeypatch.setattr(devserver, "_reachable_by_others", lambda path: True)
    reachable: dict[str, str] = {}
    devserver._local_hooks_user(reachable)
    assert reachable == {}
