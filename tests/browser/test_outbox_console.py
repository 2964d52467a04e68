"""The outbox console in a real browser: an operator finds a failing delivery from its
subscriber's figures, quarantines it with a reason, finds it under "quarantined", and
releases it."""

from __future__ import annotations

import pytest

from jobs.models import JobEvent
from tests.browser.conftest import Site, log_in, needs_chromium, screenshots
from tests.support.jobs.builders import ON_ORDER, failing

pytestmark = [
    pytest.mark.browser,
    pytest.mark.system,
    needs_chromium,
    pytest.mark.django_db(transaction=True),
]


def test_quarantine_a_failing_delivery_from_the_console_and_release_it(site: Site, page):
    delivery = failing()  # its first attempt failed: waiting out its backoff
    root = log_in(page, site)

    page.goto(f"{site.url}/admin/jobs/delivery/")
    figures = page.locator(f'#outbox-lag tr[data-subscriber="{ON_ORDER}"]')
    assert figures.locator("td.lag-failing").inner_text() == "1"
    screenshots(page, "outbox-console")
    figures.locator("td.lag-failing a").click()
    page.wait_for_url("**status=failing**")
    assert "cluster busy" in page.inner_text("#result_list")
    page.click(f'#result_list a[href*="/delivery/{delivery.pk}/"]')

    page.click("#delivery-operations a:text-is('Quarantine')")
    page.fill("#id_reason", "poison: order payload is malformed")
    page.click("input[type=submit][value^='Yes, quarantine']")
    page.wait_for_selector(".messagelist .success")
    screenshots(page, "outbox-delivery-quarantined")
    delivery.refresh_from_db()
    assert delivery.quarantine_reason == "poison: order payload is malformed"
    assert delivery.quarantined_by == root

    page.goto(f"{site.url}/admin/jobs/delivery/")
    page.locator(f'#outbox-lag tr[data-subscriber="{ON_ORDER}"] td.lag-quarantined a').click()
    page.wait_for_url("**status=quarantined**")
    row = page.locator("#result_list tbody tr")
    assert row.count() == 1 and "quarantined" in row.inner_text()
    screenshots(page, "outbox-console-quarantined")

    row.locator(f'a[href*="/delivery/{delivery.pk}/"]').first.click()
    page.click("#delivery-operations a:text-is('Release')")
    page.fill("#id_reason", "subscriber fixed")
    page.click("input[type=submit][value^='Yes, release']")
    page.wait_for_selector(".messagelist .success")
    delivery.refresh_from_db()
    assert delivery.quarantined_at is None
    assert delivery.job.state == "pending"
    released = delivery.job.events.get(kind=JobEvent.Kind.RETRIED)
    assert (released.actor, released.message) == (root, "released from quarantine: subscriber fixed")
