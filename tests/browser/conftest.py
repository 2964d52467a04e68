"""A real site for browser tests: the web process (uvicorn, ASGI: pages, SSE, WebSocket)
and a jobs_worker as subprocesses on the test database, and Debian's Chromium driven by
Playwright.

The tests skip, saying why, only when /usr/bin/chromium is missing (CI installs it, see
.ci/run). Screenshots land in var/test-artifacts/browser/.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections

from tests.support.processes import ROOT, Proc, Processes

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "var" / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium)"
)


@dataclass
class Site:
    url: str
    processes: Processes
    env: dict[str, str]

    def start_worker(self) -> Proc:
        return self.processes.manage("worker", "jobs_worker", env=self.env)


@pytest.fixture
def site(processes: Processes) -> Iterator[Site]:
    """The web server now; the worker when the test says (so it sees the start)."""
    # Small batches and a fast heartbeat (progress is flushed every quarter beat), so that
    # a 20,000-row upload shows its progress on the way.
    env = processes.env(
        SERVE_STATIC="1",
        FACTORS_INGEST_BATCH_ROWS="500",
        FACTORS_RECALC_CHUNK_ROWS="5000",
        JOBS_HEARTBEAT_SECONDS="0.2",
    )
    _, port = processes.web(env)
    yield Site(f"http://127.0.0.1:{port}", processes, env)


# Every page of the context reports what the Content-Security-Policy refused, from before
# its first script runs: the DOM's securitypolicyviolation events...
REPORT_CSP_VIOLATIONS = """
document.addEventListener('securitypolicyviolation', (e) => window.reportCspViolation(
  `${e.violatedDirective} refused ${e.blockedURI || 'inline'} at ${e.sourceFile || location.href}:` +
  `${e.lineNumber} (${e.sample})`));
"""


class CspViolations(list[str]):
    """... and Chromium's console lines about it, for the whole browser context."""

    def watch(self, context: Any) -> None:
        context.expose_function("reportCspViolation", lambda text: self.append(text))
        context.add_init_script(REPORT_CSP_VIOLATIONS)
        context.on(
            "console",
            lambda message: self.append(message.text) if "Content Security Policy" in message.text else None,
        )


@pytest.fixture
def csp_violations() -> CspViolations:
    return CspViolations()


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch, csp_violations: CspViolations) -> Iterator[Any]:
    """A fresh Chromium page. The ORM stays usable in the test while Playwright's sync
    API runs its event loop (hence DJANGO_ALLOW_ASYNC_UNSAFE, for this test only). At the
    end, no page of its context may have had anything refused by the Content-Security-
    Policy."""
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.set_default_timeout(20_000)
            csp_violations.watch(context)
            yield context.new_page()
        finally:
            browser.close()
            # Queries made while Playwright's loop ran opened a connection of their own
            # context; close it, or the test database cannot be dropped at the end.
            connections.close_all()
    assert not csp_violations, "Content-Security-Policy violations:\n" + "\n".join(csp_violations)


def log_in(page: Any, site: Site, username: str = "root") -> User:
    """A superuser, logged in through the real login form."""
    user = User.objects.create_superuser(username, password="pw-" + username)
    page.goto(f"{site.url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("input[type=submit]")
    page.wait_for_url(f"{site.url}/admin/")
    return user


# The widths pages are looked at: a laptop's and a phone's.
WIDTHS = {"desktop": 1440, "phone": 390}


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def screenshots(page: Any, name: str) -> None:
    """The page as it stands, at a laptop's width (``name``) and at a phone's
    (``name-phone``), laid out again at each without a reload (the state a test brought it
    to stays); then at the width it had."""
    before = page.viewport_size
    for width_name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, name if width_name == "desktop" else f"{name}-{width_name}")
    page.set_viewport_size(before)


# Records every state and progress value the page's job boxes take, from before the
# worker starts: a state held for a few milliseconds is still seen.
WATCH_BOXES = """() => {
  window.__seen = new Set();
  const note = () => document.querySelectorAll('.pl-job').forEach(el => {
    const bar = el.querySelector('.pl-progress');
    window.__seen.add(el.dataset.state + ':' + (bar.getAttribute('aria-valuenow') ?? ''));
  });
  note();
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true,
                                                     attributes: true});
  window.__notReloaded = true;
}"""
