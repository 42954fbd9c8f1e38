"""End to end: the viewer page in headless Chromium follows a run live.

The page opens on a run, a follow-up is queued through the API, and the page shows it without
a reload. The system Chromium (Debian's ``chromium``; ``.ci/run`` installs it) is driven by
Playwright, never a browser Playwright downloads. Without Chromium the test skips locally and
fails when ``CI`` is set. A screenshot is kept in the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import TOKEN, Served, queue_follow_up, started_run

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 10_000
SCREENSHOT_VARIABLE = "RUNLEDGER_VIEWER_SCREENSHOT"
"""When set, the screenshot is also copied there (how docs/viewer.png was made)."""


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def test_the_page_shows_a_follow_up_queued_through_the_api_without_reload(
    browser: Any, served_memory: Served, tmp_path: Path
) -> None:
    api = served_memory.api
    started_run(api)
    api.ok("record_progress", "run-1", status="running", current_node="draft")
    api.ok("publish_update", "run-1", attempt_id="a-1", update_type="step", key="draft", data=0.5)
    policy = {"rules": [{"path": "/tone", "permissions": {"human": ["read", "replace"]}}]}
    api.ok("ensure_settings_scope", "run-1", settings={"tone": "brief"}, policy=policy)
    first = queue_follow_up(api, "run-1", "request-1", "first")["follow_up"]["follow_up_id"]
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    loads: list[str] = []
    page.on("load", lambda _page: loads.append("load"))

    page.goto(f"{served_memory.base_url}/#token={TOKEN}&run=run-1")
    follow_ups = page.locator("[data-testid=follow-ups]")
    follow_ups.get_by_text(first).wait_for(timeout=WAIT_MS)
    page.locator("[data-testid=stream]").get_by_text("live").wait_for(timeout=WAIT_MS)
    second = queue_follow_up(api, "run-1", "request-2", "second")["follow_up"]["follow_up_id"]
    follow_ups.get_by_text(second).wait_for(timeout=WAIT_MS)
    api.ok("pause_run", "run-1", status_detail="waiting for review")
    page.locator("[data-testid=graph]").get_by_text("waiting for review").wait_for(timeout=WAIT_MS)
    shot = tmp_path / "viewer.png"
    page.screenshot(path=str(shot), full_page=True)

    assert loads == ["load"], "the page was never reloaded"
    assert follow_ups.locator("tr").count() == 2
    revision = api.ok("viewer_deltas", "run-1", after_revision=1)["current_revision"]
    assert page.locator("[data-testid=revision]").inner_text() == str(revision)
    assert page.locator("[data-testid=runs]").get_by_text("run-1").count() == 1
    assert shot.stat().st_size > 0
    if os.environ.get(SCREENSHOT_VARIABLE):
        shutil.copyfile(shot, os.environ[SCREENSHOT_VARIABLE])


def test_the_page_reloads_a_snapshot_when_its_cursor_fell_out_of_retention(
    browser: Any, served_memory: Served
) -> None:
    api = served_memory.api
    started_run(api)
    page = browser.new_page()
    held: list[Any] = []
    # The page's stream is held back after its snapshot, while the run moves 300 revisions on.
    page.route("**/runs/run-1/viewer?*", lambda route: held.append(route))
    page.goto(f"{served_memory.base_url}/#token={TOKEN}&run=run-1")
    for _ in range(WAIT_MS // 20):
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the page never opened its stream"
    store = served_memory.store
    for n in range(300):
        store.publish_update("run-1", attempt_id="a-1", update_type="step", key="k", data=n)
    held[0].continue_()
    page.unroute("**/runs/run-1/viewer?*")

    notice = page.locator("[data-testid=notice]")
    notice.get_by_text("Reloaded a snapshot").wait_for(timeout=WAIT_MS)
    page.locator("[data-testid=stream]").get_by_text("live").wait_for(timeout=WAIT_MS)
    current = api.ok("viewer_deltas", "run-1", after_revision=1)["current_revision"]
    assert page.locator("[data-testid=revision]").inner_text() == str(current)
    queue_follow_up(api, "run-1", "request-1")
    page.locator("[data-testid=revision]").get_by_text(str(current + 1)).wait_for(timeout=WAIT_MS)


def test_the_runs_list_pages_forward_and_back(browser: Any, served_memory: Served) -> None:
    store = served_memory.store
    for number in range(1, 26):
        store.create_run(f"run-{number:02d}", workflow_name="echo", input={})
    page = browser.new_page()
    page.goto(f"{served_memory.base_url}/#token={TOKEN}")
    rows = page.locator("[data-testid=runs] tr")
    rows.first.wait_for(timeout=WAIT_MS)

    first = rows.count()
    page.get_by_role("button", name="Next page").click()
    page.locator("[data-testid=runs]").get_by_text("run-25").wait_for(timeout=WAIT_MS)
    second = rows.count()
    page.get_by_role("button", name="First page").click()
    page.locator("[data-testid=runs]").get_by_text("run-01").wait_for(timeout=WAIT_MS)

    assert (first, second) == (20, 5)
    assert page.get_by_role("button", name="Next page").is_enabled()
