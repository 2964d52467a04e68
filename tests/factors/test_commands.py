"""The CO2 calculator's management commands."""

from __future__ import annotations

import uuid
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from factors import staging
from factors.models import EmissionFactor, Unit, Upload
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.support.base import granted, staff, tenant
from tests.support.factors.builders import csv_bytes, module, plane_factors, plane_rows, report

pytestmark = pytest.mark.django_db


def command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_upload_commands_start_pipelines_as_the_named_user(tmp_path, clock):
    olga = granted(staff("olga", operator=True), "factors.operate_dataentry")
    plane_factors()
    travel = module(report())
    entries = tmp_path / "entries.csv"
    entries.write_bytes(csv_bytes(["quantity", "unit", "haul", "cabin"], plane_rows(12)))

    output = command(
        "factors_upload_entries", str(travel.report_id), "travel", "plane", str(entries), "--user", "olga"
    )

    job = Job.objects.get(type="factors.csv_ingest")
    assert f"Started job {job.pk} (factors.csv_ingest, 12 rows)" in output
    assert job.created_by == olga
    run_until_idle()
    factors = tmp_path / "factors.csv"
    factors.write_bytes(b"year,haul,cabin,value,unit\n2024,short,economy,0.2,km\n")
    command("factors_upload_factors", "plane", str(factors))
    command("factors_recalculate", "plane", "--year", "2024")
    units = tmp_path / "units.csv"
    units.write_bytes(b"code,name\nLAB9,Lab nine\n")
    command("factors_sync_units", "2025", "--file", str(units))
    run_until_idle()
    assert Unit.objects.filter(code="LAB9").exists()
    changed = EmissionFactor.objects.get(classification={"haul": "short", "cabin": "economy"})
    assert changed.value == Decimal("0.2")


def test_a_refused_file_is_a_command_error_listing_rows(tmp_path):
    travel = module(report())
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"quantity,unit,haul,cabin\n1,km,=x,economy\n")

    with pytest.raises(CommandError, match="row 2, column haul: starts with '='"):
        command("factors_upload_entries", str(travel.report_id), "travel", "plane", str(bad))
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        command("factors_recalculate", "plane", "--user", "nobody")
    with pytest.raises(CommandError, match="unknown module 'space'"):
        command("factors_upload_entries", str(travel.report_id), "space", "plane", str(bad))


def test_a_user_without_the_operate_permission_is_refused_and_nothing_starts(tmp_path):
    """The command asks what the admin and the API ask: ``--user bob`` acts as bob, so
    bob must hold the permission, and a platform operator's for the shared factors."""
    travel = module(report(tenant=tenant("Acme")))
    entries = tmp_path / "entries.csv"
    entries.write_bytes(csv_bytes(["quantity", "unit", "haul", "cabin"], plane_rows(2)))
    staff("bob", of=tenant("Acme"))
    granted(staff("carl", of=tenant("Acme")), "factors.operate_emissionfactor")

    with pytest.raises(CommandError, match=r"'bob' may not do this: .*factors\.operate_dataentry"):
        command(
            "factors_upload_entries", str(travel.report_id), "travel", "plane", str(entries), "--user", "bob"
        )
    with pytest.raises(CommandError, match=r"'carl' may not do this: .*platform operator"):
        command("factors_recalculate", "plane", "--user", "carl")
    assert not Job.objects.exists()


def test_a_tenants_staff_may_not_upload_into_another_tenants_report(tmp_path):
    theirs = module(report(tenant=tenant("Globex")))
    entries = tmp_path / "entries.csv"
    entries.write_bytes(csv_bytes(["quantity", "unit", "haul", "cabin"], plane_rows(2)))
    granted(staff("carl", of=tenant("Acme")), "factors.operate_dataentry")

    with pytest.raises(CommandError, match=f"'carl' may not act on report {theirs.report_id}: it is not"):
        command(
            "factors_upload_entries", str(theirs.report_id), "travel", "plane", str(entries), "--user", "carl"
        )
    assert not Job.objects.exists()


def test_old_staged_uploads_are_cleaned_with_their_records(upload_dir):
    upload_dir.mkdir(parents=True)
    (upload_dir / "old.csv").write_text("1,km,short,economy\n")
    staged = uuid.uuid4()
    (upload_dir / staged.hex).write_text("1,km,short,economy\n")
    Upload.objects.create(id=staged, kind="units", rows=1, columns=["code"])
    assert "Would delete 2 staged upload(s) and 1 record(s)" in command(
        "factors_clean_uploads", "--days", "0", "--dry-run"
    )
    assert Upload.objects.exists()
    assert "Deleted 2 staged upload(s) and 1 record(s)" in command("factors_clean_uploads", "--days", "0")
    assert not list(upload_dir.iterdir()) and not Upload.objects.exists()


def test_old_staged_uploads_are_cleaned_from_any_fsspec_store(settings):
    settings.INTAKE_STAGING_URL = f"memory://staging-{uuid.uuid4().hex}"
    staged = uuid.uuid4()
    store = staging.store()
    with store.stage() as pending:
        pending.write(b"1,km,short,economy\n")
        pending.keep()
    Upload.objects.create(id=uuid.UUID(pending.id), kind="units", rows=1, columns=["code"])
    Upload.objects.create(id=staged, kind="units", rows=1, columns=["code"])  # its file is gone

    output = command("factors_clean_uploads", "--days", "0")

    assert output == (
        f"Deleted 1 staged upload(s) and 2 record(s) older than 0 days in "
        f"{settings.INTAKE_STAGING_URL}/factors.\n"
    )
    assert store.files() == [] and not Upload.objects.exists()
