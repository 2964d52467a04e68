"""The entries upload form in Chromium, under the site's Content-Security-Policy: the type
select offers only the chosen module's types and the example CSV follows the chosen type
(factors/static/factors/upload_form.js)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import log_in, needs_chromium
from tests.support.factors import builders

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]


def offered(page) -> list[str]:
    return page.eval_on_selector_all("#id_data_entry_type option", "els => els.map(e => e.value)")


def example(page) -> tuple[str, str]:
    return (page.text_content("#csv-example-header"), page.text_content("#csv-example-row"))


def test_the_type_select_follows_the_module_and_the_example_follows_the_type(site, page):
    builders.report("LAB1", 2024)
    log_in(page, site)

    page.goto(f"{site.url}/admin/factors/dataentry/upload/")
    page.wait_for_selector("#csv-example-row")
    assert offered(page) == ["plane", "train", "car"]
    assert example(page) == ("quantity,unit,haul,cabin", "120.5,km,short,economy")

    page.select_option("#id_module_type", "energy")
    assert offered(page) == ["electricity", "heating"]
    assert example(page) == ("quantity,unit,country", "120.5,kwh,fr")

    page.select_option("#id_data_entry_type", "heating")
    assert example(page) == ("quantity,unit,energy", "120.5,kwh,natural_gas")

    page.select_option("#id_module_type", "purchases")
    assert offered(page) == ["goods", "services"]
    assert page.input_value("#id_data_entry_type") == "goods"
    assert example(page) == ("quantity,unit,category", "120.5,eur,it_equipment")
