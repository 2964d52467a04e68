"""``manage.py export_demo`` runs without any Trino binding: its entities are datasets."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from exports.models import ExportJob, Snapshot, TrinoBinding

pytestmark = pytest.mark.django_db


def test_the_demo_queues_one_snapshot_of_datasets_once():
    out = io.StringIO()
    call_command("export_demo", stdout=out)
    call_command("export_demo", stdout=out)

    snap = Snapshot.objects.get()
    assert "is queued" in out.getvalue() and "already queued" in out.getvalue()
    assert set(ExportJob.objects.values_list("engine", "starburst_role")) == {("postgres", "")}
    assert snap.mapping.name == "demo-export" and not TrinoBinding.objects.exists()
