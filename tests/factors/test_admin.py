"""The admin pages: reports with their modules' badge, entries, factors with the stale
filter and readable classifications, emissions, and the upload forms that start the same
pipelines (the entries form offering the chosen module's types, with an example file)."""

from __future__ import annotations

import io

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.files.uploadedfile import SimpleUploadedFile

from factors import catalog, csv_schemas
from factors.models import CarbonReport, DataEntry, EmissionFactor
from intake.csv_validation import validate
from jobs.models import Job
from jobs.worker import run_until_idle
from tests.support.base import granted, staff, tenant
from tests.support.factors.builders import (
    csv_bytes,
    dispatch,
    factor,
    module,
    plane_factors,
    plane_rows,
    report,
)

pytestmark = pytest.mark.django_db

HEADER = ["quantity", "unit", "haul", "cabin"]


@pytest.fixture
def travel():
    plane_factors()
    return module(report())


def test_a_report_page_shows_stats_and_a_recalculating_badge_while_a_pipeline_runs(
    admin_client, travel, clock
):
    dispatch(travel, csv_bytes(HEADER, plane_rows(40)))
    url = f"/admin/factors/carbonreport/{travel.report_id}/change/"

    page = admin_client.get(url).content.decode()
    assert "Recalculating…" in page

    run_until_idle()
    page = admin_client.get(url).content.decode()
    assert "Recalculating…" not in page and "Up to date" in page
    assert "40 entries" in page


def test_every_factors_page_answers_with_rows_in_it(admin_client, travel, clock):
    dispatch(travel, csv_bytes(HEADER, plane_rows(10)))
    run_until_idle()
    entry = DataEntry.objects.first()
    for url in [
        "/admin/factors/unit/",
        f"/admin/factors/unit/{travel.report.unit_id}/change/",
        "/admin/factors/carbonreport/",
        "/admin/factors/dataentry/",
        f"/admin/factors/dataentry/{entry.pk}/change/",
        "/admin/factors/emissionfactor/",
        f"/admin/factors/emissionfactor/{EmissionFactor.objects.first().pk}/change/",
        "/admin/factors/emission/",
        f"/admin/factors/emission/{entry.pk}/change/",
        "/admin/factors/dataentry/upload/",
        "/admin/factors/emissionfactor/upload/",
        "/admin/factors/unit/upload/",
        "/admin/factors/carbonreport/add/",
    ]:
        assert admin_client.get(url).status_code == 200, url


def test_the_stale_filter_lists_factors_left_out_of_the_latest_upload(admin_client, travel):
    EmissionFactor.objects.filter(classification__haul="long").update(is_stale=True)

    page = admin_client.get("/admin/factors/emissionfactor/?stale=yes").content.decode()

    assert page.count('class="field-data_entry_type"') == 2


def test_the_entries_upload_form_starts_the_pipeline_as_the_staff_user(
    admin_client, admin_user, travel, clock
):
    response = admin_client.post(
        "/admin/factors/dataentry/upload/",
        {
            "report": travel.report_id,
            "module_type": "travel",
            "data_entry_type": "plane",
            "file": SimpleUploadedFile("e.csv", csv_bytes(HEADER, plane_rows(5))),
        },
    )

    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.type, job.created_by) == ("factors.csv_ingest", admin_user)


def test_a_refused_upload_lists_its_errors_and_starts_nothing(admin_client, travel):
    response = admin_client.post(
        "/admin/factors/dataentry/upload/",
        {
            "report": travel.report_id,
            "module_type": "travel",
            "data_entry_type": "plane",
            "file": SimpleUploadedFile("e.csv", b"quantity,unit,haul,cabin\nabc,km,short,economy\n"),
        },
    )

    page = response.content.decode()
    assert response.status_code == 200
    assert "1 error: nothing was written" in page and "not a number" in page
    assert not Job.objects.exists()


def test_the_factor_upload_form_is_for_platform_operators(client, travel):
    client.force_login(staff("tess", of=tenant("Acme")))
    assert client.get("/admin/factors/emissionfactor/upload/").status_code == 403


def log_of(job: Job) -> list[tuple[str, str]]:
    """The admin log entries on ``job``: who, and what they asked for."""
    return list(
        LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(Job), object_id=str(job.pk))
        .order_by("pk")
        .values_list("user__username", "change_message")
    )


def entries_upload(report_id: int, rows: int = 5) -> dict:
    return {
        "report": report_id,
        "module_type": "travel",
        "data_entry_type": "plane",
        "file": SimpleUploadedFile("e.csv", csv_bytes(HEADER, plane_rows(rows))),
    }


def test_each_upload_page_records_in_the_admin_log_who_started_what(client, clock):
    """Entries, factors and units alike: the log entry is on the job the upload started."""
    acme = tenant("Acme")
    plane_factors()
    travel = module(report(tenant=acme))
    tess = granted(staff("tess", of=acme), "factors.operate_dataentry")
    olga = granted(
        staff("olga", operator=True),
        "factors.operate_emissionfactor",
        "factors.operate_unit",
        "jobs.view_job",
    )

    client.force_login(tess)
    assert (
        client.post("/admin/factors/dataentry/upload/", entries_upload(travel.report_id)).status_code == 302
    )
    client.force_login(olga)
    factors_file = SimpleUploadedFile("f.csv", b"year,haul,cabin,value,unit\n2024,short,economy,0.2,km\n")
    response = client.post(
        "/admin/factors/emissionfactor/upload/", {"data_entry_type": "plane", "file": factors_file}
    )
    assert response.status_code == 302
    units_file = SimpleUploadedFile("u.csv", b"code,name\nLAB9,Lab nine\n")
    assert client.post("/admin/factors/unit/upload/", {"year": 2025, "file": units_file}).status_code == 302

    ingest, factor_ingest, unit_sync = (
        Job.objects.get(type=name)
        for name in ("factors.csv_ingest", "factors.factor_ingest", "factors.unit_sync")
    )
    assert log_of(ingest) == [
        ("tess", f"Upload entries CSV via the admin (plane into {travel} from e.csv, 5 rows)")
    ]
    assert log_of(factor_ingest) == [("olga", "Upload factors CSV via the admin (plane from f.csv, 1 row)")]
    assert log_of(unit_sync) == [("olga", "Sync units via the admin (2025 from u.csv, 1 row)")]
    assert (ingest.created_by, factor_ingest.created_by, unit_sync.created_by) == (tess, olga, olga)


def test_a_unit_sync_without_a_file_or_address_reads_the_configured_one(
    admin_client, admin_user, settings, clock
):
    """As the form says: FACTORS_UNITS_URL, which the log entry names."""
    settings.FACTORS_UNITS_URL = "https://directory.example.org/units"
    settings.INTAKE_HTTP_ALLOW = ["directory.example.org"]

    assert admin_client.post("/admin/factors/unit/upload/", {"year": 2025}).status_code == 302

    job = Job.objects.get(type="factors.unit_sync")
    assert job.payload["url"] == "https://directory.example.org/units"
    assert log_of(job) == [
        ("admin", "Sync units via the admin (2025 from https://directory.example.org/units)")
    ]


@pytest.mark.parametrize(
    "who, url",
    [
        # A tenant's staff without the entries' operate permission.
        (lambda: staff("bob", of=tenant("Acme")), "/admin/factors/dataentry/upload/"),
        # Granted another model's.
        (
            lambda: granted(staff("bob", of=tenant("Acme")), "factors.operate_carbonreport"),
            "/admin/factors/dataentry/upload/",
        ),
        # A platform operator without the factors' or the units' permission.
        (
            lambda: granted(staff("bob", operator=True), "factors.operate_dataentry"),
            "/admin/factors/emissionfactor/upload/",
        ),
        (
            lambda: granted(staff("bob", operator=True), "factors.operate_emissionfactor"),
            "/admin/factors/unit/upload/",
        ),
        # The permission, but a tenant's staff: factors and units are every tenant's.
        (
            lambda: granted(staff("bob", of=tenant("Acme")), "factors.operate_unit"),
            "/admin/factors/unit/upload/",
        ),
    ],
)
def test_an_upload_page_refuses_staff_without_its_operate_permission_and_starts_nothing(
    client, clock, who, url
):
    travel = module(report(tenant=tenant("Acme")))
    client.force_login(who())
    forms = {
        "/admin/factors/dataentry/upload/": entries_upload(travel.report_id),
        "/admin/factors/emissionfactor/upload/": {
            "data_entry_type": "plane",
            "file": SimpleUploadedFile("f.csv", b"year,haul,cabin,value,unit\n2024,short,economy,0.2,km\n"),
        },
        "/admin/factors/unit/upload/": {
            "year": 2025,
            "file": SimpleUploadedFile("u.csv", b"code,name\nLAB9,Lab nine\n"),
        },
    }

    assert client.get(url).status_code == 403
    assert client.post(url, forms[url]).status_code == 403
    assert not Job.objects.exists() and not LogEntry.objects.exists()


def test_a_refused_upload_is_not_in_the_admin_log(admin_client, travel):
    bad = SimpleUploadedFile("e.csv", b"quantity,unit,haul,cabin\nabc,km,short,economy\n")
    response = admin_client.post(
        "/admin/factors/dataentry/upload/",
        {"report": travel.report_id, "module_type": "travel", "data_entry_type": "plane", "file": bad},
    )
    assert response.status_code == 200
    assert not LogEntry.objects.exists()


def test_opening_a_report_in_the_admin_creates_its_modules(admin_client, travel):
    response = admin_client.post(
        "/admin/factors/carbonreport/add/", {"unit": travel.report.unit_id, "year": 2025}
    )
    assert response.status_code == 302
    assert CarbonReport.objects.get(year=2025).modules.count() == 3


def test_recompute_stats_queues_one_aggregation_per_module(admin_client, admin_user, travel, clock):
    admin_client.post(
        "/admin/factors/carbonreport/", {"action": "recompute_stats", "_selected_action": [travel.report_id]}
    )
    assert Job.objects.filter(type="factors.aggregation", created_by=admin_user).count() == 3


def test_classifications_read_as_key_value_lines_escaped_not_as_json(admin_client, travel, clock):
    hostile = factor("train", 2024, {"network": "<b>urban</b>"}, "0.004")
    dispatch(travel, csv_bytes(HEADER, plane_rows(1)))
    run_until_idle()
    entry = DataEntry.objects.get()

    pages = {
        url: admin_client.get(url).content.decode()
        for url in [
            "/admin/factors/emissionfactor/",
            f"/admin/factors/emissionfactor/{hostile.pk}/change/",
            "/admin/factors/dataentry/",
            f"/admin/factors/dataentry/{entry.pk}/change/",
        ]
    }

    for url, page in pages.items():
        assert '{"haul"' not in page and "{&quot;" not in page, url
    for listing in ("/admin/factors/emissionfactor/", "/admin/factors/dataentry/"):
        assert '<div class="classification-line">haul: short</div>' in pages[listing]
    factor_page = pages[f"/admin/factors/emissionfactor/{hostile.pk}/change/"]
    assert '<div class="classification-line">network: &lt;b&gt;urban&lt;/b&gt;</div>' in factor_page
    assert "<b>urban</b>" not in factor_page
    entry_page = pages[f"/admin/factors/dataentry/{entry.pk}/change/"]
    assert '<div class="classification-line">cabin: economy</div>' in entry_page
    assert '<div class="classification-line">haul: short</div>' in entry_page


def test_the_entries_upload_form_refuses_a_type_of_another_module_naming_it(admin_client, travel):
    response = admin_client.post(
        "/admin/factors/dataentry/upload/",
        {
            "report": travel.report_id,
            "module_type": "energy",
            "data_entry_type": "plane",
            "file": SimpleUploadedFile("e.csv", csv_bytes(HEADER, plane_rows(5))),
        },
    )

    assert response.status_code == 200
    assert response.context["form"].errors == {
        "data_entry_type": [
            "plane is not an entry type of the energy module: choose one of electricity, heating"
        ]
    }
    assert not Job.objects.exists()
    # The example follows the module the operator chose.
    assert response.context["example"] == ("quantity,unit,country", "120.5,kwh,fr")


def test_the_entries_upload_page_groups_types_by_module_with_their_example_and_its_script(
    admin_client, travel
):
    page = admin_client.get("/admin/factors/dataentry/upload/").content.decode()

    assert '<optgroup label="Energy">' in page
    assert (
        '<option value="heating" data-module="energy" data-header="quantity,unit,energy" '
        'data-example="120.5,kwh,natural_gas">'
    ) in page
    assert '<code id="csv-example-header">quantity,unit,haul,cabin</code>' in page
    assert '<code id="csv-example-row">120.5,km,short,economy</code>' in page
    assert '<script src="/static/factors/upload_form.js"></script>' in page
    assert "<script>" not in page  # nothing inline: the site's CSP runs none


@pytest.mark.parametrize("data_entry_type", list(catalog.SPECS))
def test_each_example_is_a_file_the_parser_accepts(data_entry_type):
    header, row = csv_schemas.entries_example(data_entry_type)

    checked = validate(io.BytesIO(f"{header}\n{row}\n".encode()), csv_schemas.entries(data_entry_type))

    assert (checked.ok, checked.rows, checked.header) == (True, 1, header.split(","))


def test_factors_actions_need_their_operate_permission(client):
    """Recalculating emissions is a platform operator's action that also needs
    ``factors.operate_emissionfactor``: a platform operator without it is refused."""
    from django.contrib.auth.models import Permission

    plane_factors()
    olga = staff("olga", operator=True)
    olga.user_permissions.add(*Permission.objects.filter(codename__in=["view_emissionfactor"]))
    client.force_login(olga)
    chosen = list(EmissionFactor.objects.values_list("pk", flat=True)[:1])
    body = {"action": "recalculate", "_selected_action": chosen}

    assert 'value="recalculate"' not in client.get("/admin/factors/emissionfactor/").content.decode()
    client.post("/admin/factors/emissionfactor/", body)
    assert not Job.objects.exists()

    olga.user_permissions.add(Permission.objects.get(codename="operate_emissionfactor"))
    client.post("/admin/factors/emissionfactor/", body)
    assert Job.objects.filter(type__endswith="recalc").exists()
