"""The hook catalogue in Chromium: a platform operator's list and entry, and a tenant's
staff adding a source whose hook picks an entry and fills its parameters, at a desktop's
width and a phone's."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from ingest.runs.models import Hook, HookTemplate, IngestSource
from tests.browser.conftest import WIDTHS, log_in, needs_chromium, screenshot
from tests.support.base import staff, tenant
from tests.support.ingest.builders import entry

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]


def check_records() -> HookTemplate:
    return entry(
        ["/usr/local/bin/check-records", "--require", "{require}", "--unique", "{unique}"],
        "check-records",
        description="Every record a JSON object with the required "
        "fields; no value of the unique field twice.",
        timeout_seconds=120,
        parameters=[
            {
                "name": "require",
                "type": "string",
                "required": True,
                "max_length": 500,
                "pattern": r"^[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*$",
                "description": "Fields every record must have.",
            },
            {
                "name": "unique",
                "type": "string",
                "default": "id",
                "max_length": 100,
                "pattern": r"^[A-Za-z0-9_]+$",
                "description": "A field no two records share.",
            },
        ],
    )


def log_in_as_staff(page, site, username: str) -> None:
    page.goto(f"{site.url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("input[type=submit]")
    page.wait_for_url(f"{site.url}/admin/")


def test_an_operator_reads_the_catalogue_and_its_entry(site, page):
    made = check_records()
    log_in(page, site)

    for width_name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{site.url}/admin/ingest/hooktemplate/")
        assert page.is_visible("text=check-records")
        screenshot(page, f"hook-catalogue-{width_name}")
        page.goto(f"{site.url}/admin/ingest/hooktemplate/{made.pk}/change/")
        assert page.is_visible("#id_command")
        screenshot(page, f"hook-catalogue-entry-{width_name}")


def test_tenant_staff_add_a_source_whose_hook_fills_an_entrys_parameters(site, page, settings):
    made = check_records()
    acme = tenant("Acme")
    alice = staff("alice", of=acme)
    alice.user_permissions.set(Permission.objects.filter(content_type__app_label="ingest"))
    log_in_as_staff(page, site, "alice")

    page.set_viewport_size({"width": WIDTHS["phone"], "height": 900})
    page.goto(f"{site.url}/admin/ingest/ingestsource/add/")
    page.fill("#id_name", "orders")
    page.select_option("#id_kind", "test_counting")
    page.fill("#id_config", '{"batches": 2}')
    page.click("#hooks-group .add-row a")
    page.fill("#id_hooks-0-name", "check")
    page.select_option("#id_hooks-0-template", str(made.pk))
    page.fill("#id_hooks-0-parameters", '{"require": "id,amount; rm -rf /"}')
    screenshot(page, "source-with-hook-phone")
    page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
    with page.expect_navigation():
        page.click("input[name=_continue]")
    # A value outside its pattern is refused by name, and nothing is saved.
    page.wait_for_selector(".errornote")
    assert "require" in page.text_content("#hooks-group .errorlist")
    screenshot(page, "source-with-hook-refused-desktop")
    assert not IngestSource.objects.exists()

    page.fill("#id_hooks-0-parameters", '{"require": "id,amount"}')
    with page.expect_navigation():
        page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    screenshot(page, "source-with-hook-desktop")
    hook = Hook.objects.get()
    assert (hook.template_id, hook.parameters) == (made.pk, {"require": "id,amount"})
