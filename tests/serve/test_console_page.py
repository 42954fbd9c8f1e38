"""End to end: the run console in headless Chromium, at 1440 and 390 px, over the demo's story.

The system Chromium (Debian's ``chromium``; ``.ci/run`` installs it) is driven by Playwright,
never a browser Playwright downloads. Without Chromium these tests skip locally and fail when
``CI`` is set. The token is put in the tab's sessionStorage as the token prompt does (one test
goes through the prompt itself). axe-core (vendored in ``tests/serve/axe``) checks each view.
With ``RUNLEDGER_CONSOLE_SCREENSHOTS=docs`` the story test writes the README's screenshots.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from runledger.infrastructure import verify_bundle
from runledger.infrastructure.cli.demo_story import TEST_FAILURE
from tests.serve.conftest import (
    TOKEN,
    Served,
    SharedHost,
    queue_follow_up,
    serving,
    started_run,
)
from tests.serve.console_story import play_demo

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
AXE = Path(__file__).parent / "axe" / "axe.min.js"
WAIT_MS = 10_000
VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
SCREENSHOTS_VARIABLE = "RUNLEDGER_CONSOLE_SCREENSHOTS"
"""When set, a folder: the story test saves console-{desktop,phone}[-runs].png there."""
TOKEN_SCRIPT = f"sessionStorage.setItem('runledger-token', {json.dumps(TOKEN)})"


@pytest.fixture(scope="module")
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


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    """Opens a console URL in a new tab of the given size, holding the token unless told."""
    contexts: list[Any] = []

    def open_url(url: str, viewport: str = "desktop", *, token: bool = True) -> Any:
        context = browser.new_context(viewport=VIEWPORTS[viewport], accept_downloads=True)
        contexts.append(context)
        if token:
            context.add_init_script(TOKEN_SCRIPT)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.errors = errors
        page.goto(url)
        return page

    yield open_url
    for context in contexts:
        context.close()


def run_url(served: Served, run_id: str) -> str:
    return f"{served.base_url}/console/runs/{quote(run_id, safe='')}"


def panel(page: Any, name: str) -> Any:
    return page.locator(f"[data-testid={name}]")


def connected(page: Any) -> Any:
    """The page, once its live stream is connected."""
    page.locator("[data-testid=connection][data-state=connected]").wait_for()
    return page


WIDE_ELEMENTS = """() => [...document.querySelectorAll("body *")]
  .filter((e) => e.getBoundingClientRect().right > innerWidth + 0.5)
  .map((e) => e.tagName + "." + e.className + ": " + (e.textContent || "").slice(0, 40))"""


def page_width(page: Any) -> int:
    width: int = page.evaluate("document.documentElement.scrollWidth")
    return width


def serious_violations(page: Any) -> list[Any]:
    """axe-core's serious and critical findings on the page as it is now."""
    page.add_script_tag(path=str(AXE))
    found: list[Any] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
             .filter((v) => v.impact === "serious" || v.impact === "critical")
             .map((v) => ({id: v.id, impact: v.impact,
                           nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" "))}))"""
    )
    return found


def screenshot(page: Any, name: str, *, full_page: bool) -> None:
    folder = os.environ.get(SCREENSHOTS_VARIABLE)
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=full_page)


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_every_panel_shows_the_demo_story_and_links_work(
    open_page: Any, served_memory: Served, viewport: str, tmp_path: Path
) -> None:
    demo = play_demo(served_memory.store)
    child, review = demo.ids.continuation_run, demo.ids.review_run
    page = open_page(f"{served_memory.base_url}/console", viewport)
    runs = panel(page, "runs")
    runs.locator("tr").nth(2).wait_for()
    connected(page)
    list_width, list_violations = page_width(page), serious_violations(page)
    screenshot(page, f"console-{viewport}-runs", full_page=False)

    runs.get_by_role("link", name=child).click()
    panel(page, "event-rows").locator("tr").first.wait_for()
    panel(page, "effects").get_by_text("status-check").wait_for()
    texts = {
        name: panel(page, name).inner_text()
        for name in ("values", "lineage", "follow-ups", "messages", "settings", "session")
    }
    header = panel(page, "run-header").inner_text()
    effects, lease = panel(page, "effects").inner_text(), panel(page, "lease").inner_text()
    run_width, run_violations = page_width(page), serious_violations(page)
    page.get_by_role("button", name="Verify (audit --verify)").click()
    panel(page, "verdict").get_by_text("verified").wait_for()
    screenshot(page, f"console-{viewport}", full_page=viewport == "desktop")
    page.emulate_media(color_scheme="dark")
    dark_violations = serious_violations(page)
    screenshot(page, f"console-{viewport}-dark", full_page=False)
    page.emulate_media(color_scheme="light")
    panel(page, "wire-filter").select_option("run.finished")
    page.wait_for_function("document.querySelectorAll('[data-testid=event-rows] tr').length === 1")
    finished = panel(page, "event-rows").inner_text()
    with page.expect_download() as download:
        page.get_by_role("button", name="Download bundle").click()
    bundle = tmp_path / "bundle.jsonl"
    download.value.save_as(bundle)
    panel(page, "lineage").get_by_role("link", name=review).click()
    panel(page, "decision").get_by_text("Approve the review plan?").wait_for()
    decision = panel(page, "decision").inner_text()
    page.go_back()
    page.wait_for_url(run_url(served_memory, child))
    panel(page, "effects").get_by_text("status-check").wait_for()
    page.go_back()
    runs.locator("tr").nth(2).wait_for()
    back_at = page.url
    page.go_forward()
    panel(page, "run-header").get_by_text(child).wait_for()

    assert list_width <= VIEWPORTS[viewport]["width"], "the runs list scrolls sideways"
    assert run_width <= VIEWPORTS[viewport]["width"], "the run page scrolls sideways"
    assert list_violations == [], list_violations
    assert run_violations == [], run_violations
    assert dark_violations == [], dark_violations
    assert child in header
    assert "failed" in header
    assert TEST_FAILURE in texts["values"]
    assert "acme/payments-api" in texts["values"]
    assert all(run_id in texts["lineage"] for run_id in (review, child, demo.restart_run))
    assert "Also check the migration guide for breaking changes." in texts["follow-ups"]
    assert "controller:ci-bot" in texts["follow-ups"]
    assert "Removed before delivery" in texts["follow-ups"]
    assert "terminal" in texts["messages"]
    assert "completed" in texts["messages"]  # the terminal message's turn
    assert '"strict"' in texts["settings"]
    assert "human:reviewer" in texts["settings"]
    assert "/strictness" in texts["settings"]
    assert "run-tests" in texts["session"]
    assert "turn_finished" in texts["session"]
    assert "applied" in effects
    assert "No lease" in lease
    assert "run.finished" in finished
    assert verify_bundle(bundle).ok
    assert "accepted" in decision
    assert "approve, revise" in decision
    assert back_at == f"{served_memory.base_url}/console"
    assert page.errors == []


def test_changes_arrive_live_without_a_reload(open_page: Any, served_memory: Served) -> None:
    api, store = served_memory.api, served_memory.store
    started_run(api, "run-1")
    page = open_page(f"{served_memory.base_url}/console")
    loads: list[str] = []
    page.on("load", lambda _page: loads.append("load"))
    runs = panel(page, "runs")
    runs.get_by_role("link", name="run-1").wait_for()
    connected(page)

    started_run(api, "run-2")
    runs.get_by_role("link", name="run-2").wait_for()
    store.finish_run("run-1", status="completed", final_output={"ok": True})
    runs.locator("tr[data-run-id=run-1][data-status=completed]").wait_for()
    panel(page, "counts").locator("[data-status=completed]").get_by_text("1").wait_for()

    runs.get_by_role("link", name="run-2").click()
    panel(page, "follow-ups").get_by_text("No follow-ups.").wait_for()
    queue_follow_up(api, "run-2", "request-1", "Summarise the diff for the release notes.")
    panel(page, "follow-ups").get_by_text("Summarise the diff").wait_for()
    store.record_progress("run-2", status="running", current_node="summarise")
    panel(page, "run-header").get_by_text("summarise").wait_for()
    store.request_human_decision(
        "run-2",
        node_id="ship",
        attempt_id="ship-1",
        request={"title": "Ship it?", "choices": ["ship", "hold"]},
    )
    form = panel(page, "answer-form")
    form.get_by_label("hold").check()
    form.get_by_role("button", name="Submit answer").click()
    panel(page, "decision").get_by_text("accepted").wait_for()
    revision = api.ok("viewer_deltas", "run-2", after_revision=1)["current_revision"]
    panel(page, "revision").get_by_text(str(revision)).wait_for()

    (decision,) = [
        store.get_human_decision(e.payload["decision_id"])
        for e in store.event_log(run_id="run-2")
        if e.wire_name == "decision.requested"
    ]
    assert decision is not None
    assert (decision.response, decision.submissions[0].actor.id) == ({"choice": "hold"}, "operator")
    assert loads == [], "the page was reloaded"
    assert page.errors == []


def test_a_deep_link_opens_its_run_and_an_unknown_one_says_so(
    open_page: Any, served_memory: Served
) -> None:
    long_id = "continuation-" + "f" * 60 + "-of-a-very-long-lineage"
    served_memory.store.create_run(long_id, workflow_name="echo", input={})
    page = open_page(run_url(served_memory, long_id), "phone")
    panel(page, "run-header").get_by_text(long_id).wait_for()
    panel(page, "event-rows").locator("tr").first.wait_for()
    # The header is laid out again as the other panels arrive (slowly on a loaded machine):
    # wait (bounded) for the layout that cuts the id, and read it in the same look, so that a
    # header drawn again in between cannot be read half laid out; a layout that never cuts
    # the id still fails below.
    read_title = (
        "() => { const e = document.querySelector('#run-title .id');"
        " return e === null ? [null, false] : [e.getAttribute('title'),"
        " e.scrollWidth > e.clientWidth]; }"
    )
    try:
        full, cut = page.wait_for_function(
            f"() => {{ const seen = ({read_title})(); return seen[1] ? seen : false; }}",
            timeout=20000,
        ).json_value()
    except PlaywrightTimeoutError:
        full, cut = page.evaluate(read_title)
    width = page.evaluate(WIDE_ELEMENTS)

    page.goto(run_url(served_memory, "no-such-run"))
    panel(page, "not-found").wait_for()

    assert (full, cut) == (long_id, True), "a long id is cut with its full value on hover"
    assert width == [], "nothing reaches past the screen's right edge"
    assert "No run has the id no-such-run" in panel(page, "not-found").inner_text()


def test_without_a_token_the_console_asks_for_one_and_keeps_it_out_of_urls(
    open_page: Any, served_memory: Served
) -> None:
    started_run(served_memory.api)
    page = open_page(f"{served_memory.base_url}/console", token=False)
    prompt = panel(page, "token-prompt")
    prompt.wait_for()
    runs_shown = panel(page, "runs").count()
    violations = serious_violations(page)

    prompt.get_by_label("Token").fill("not-the-token")
    prompt.get_by_role("button", name="Connect").click()
    panel(page, "token-prompt").get_by_text("The server refused that token.").wait_for()
    panel(page, "token-prompt").get_by_label("Token").fill(TOKEN)
    panel(page, "token-prompt").get_by_role("button", name="Connect").click()
    panel(page, "runs").get_by_role("link", name="run-1").click()
    panel(page, "run-header").get_by_text("run-1").wait_for()

    assert runs_shown == 0, "no empty panels behind the prompt"
    assert violations == [], violations
    assert page.evaluate("sessionStorage.getItem('runledger-token')") == TOKEN
    assert TOKEN not in page.url
    assert page.errors == []


def test_the_indicator_says_reconnecting_then_stale_when_the_streams_stop(
    open_page: Any, served_memory: Served, shared_host: SharedHost
) -> None:
    served_memory.store.create_run("run-1", workflow_name="echo", input={})
    page = open_page(f"{served_memory.base_url}/console")
    indicator = page.locator("[data-testid=connection]")
    connected(page)
    live = indicator.inner_text()

    # The server stops answering: its feed ends and every reconnection fails.
    page.route("**/console/api/feed*", lambda route: route.abort())
    assert shared_host.loop is not None
    shared_host.loop.call_soon_threadsafe(shared_host.app.state.server.console.feed.stop)
    page.locator("[data-testid=connection][data-state=reconnecting]").wait_for()
    reconnecting = indicator.inner_text()
    page.locator("[data-testid=connection][data-state=stale]").wait_for()

    assert live == "live"
    assert reconnecting.startswith("reconnecting")
    assert indicator.inner_text().startswith("stale since ")


def test_the_run_page_catches_up_when_its_cursor_fell_out_of_retention(
    open_page: Any, served_memory: Served
) -> None:
    api, store = served_memory.api, served_memory.store
    started_run(api)
    held: list[Any] = []
    page = open_page("about:blank")
    # The page's stream is held back after its first reads, while the run moves 300 revisions.
    page.route("**/runs/run-1/viewer?*", lambda route: held.append(route))
    page.goto(run_url(served_memory, "run-1"))
    page.wait_for_function("true")
    for _ in range(WAIT_MS // 20):
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the page never opened its stream"
    for n in range(300):
        store.publish_update("run-1", attempt_id="a-1", update_type="step", key="k", data=n)
    held[0].continue_()
    page.unroute("**/runs/run-1/viewer?*")

    current = api.ok("viewer_deltas", "run-1", after_revision=1)["current_revision"]
    panel(page, "revision").get_by_text(str(current)).wait_for()
    queue_follow_up(api, "run-1", "request-1", "after the gap")
    panel(page, "follow-ups").get_by_text("after the gap").wait_for()
    panel(page, "revision").get_by_text(str(current + 1)).wait_for()


def test_the_runs_list_pages_older_and_newer(open_page: Any, served_memory: Served) -> None:
    store = served_memory.store
    for number in range(1, 121):
        store.create_run(f"run-{number:03d}", workflow_name="echo", input={})
    page = open_page(f"{served_memory.base_url}/console")
    rows = panel(page, "runs").locator("tr")
    panel(page, "runs").get_by_role("link", name="run-120").wait_for()
    first = rows.count()

    page.get_by_role("button", name="Older").click()
    panel(page, "runs").get_by_role("link", name="run-070").wait_for()
    second = rows.count()
    page.get_by_role("button", name="Older").click()
    panel(page, "runs").get_by_role("link", name="run-001").wait_for()
    third = rows.count()
    older_enabled = page.get_by_role("button", name="Older").is_enabled()
    page.get_by_role("button", name="Newer").click()
    panel(page, "runs").get_by_role("link", name="run-070").wait_for()

    assert (first, second, third) == (50, 50, 20)
    assert not older_enabled
    assert panel(page, "page-info").inner_text() == "runs 51\u2013100"


def test_the_console_works_from_the_keyboard(open_page: Any, served_memory: Served) -> None:
    started_run(served_memory.api, "run-1")
    page = open_page(f"{served_memory.base_url}/console")
    panel(page, "runs").get_by_role("link", name="run-1").wait_for()
    focused: list[str] = []
    for _ in range(40):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.textContent.trim()"))
        if focused[-1] == "run-1":
            break
    page.keyboard.press("Enter")
    panel(page, "run-header").get_by_text("run-1").wait_for()
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "Verify (audit --verify)":
            break
    page.keyboard.press("Enter")
    panel(page, "verdict").get_by_text("verified").wait_for()

    # After each navigation the focus is on the content: the first Tab reaches its first control.
    assert focused[0] == "all 1"
    assert "Apply" in focused
    assert focused[-1] == "run-1"


def test_a_live_update_keeps_the_keyboard_focus_on_its_control(
    open_page: Any, served_memory: Served
) -> None:
    # The header is drawn anew on each change; a keyboard user on its Verify button stays there.
    api, store = served_memory.api, served_memory.store
    started_run(api, "run-1")
    page = connected(open_page(f"{served_memory.base_url}/console/runs/run-1"))
    verify = panel(page, "verify")
    verify.focus()

    store.record_progress("run-1", status="running", current_node="summarise")
    panel(page, "run-header").get_by_text("summarise").wait_for()
    focused = page.evaluate("document.activeElement.dataset.testid")
    page.keyboard.press("Enter")
    panel(page, "verdict").get_by_text("verified").wait_for()

    assert focused == "verify"


def test_a_live_update_of_the_runs_list_keeps_the_keyboard_focus(
    open_page: Any, served_memory: Served
) -> None:
    api, store = served_memory.api, served_memory.store
    started_run(api, "run-1")
    page = open_page(f"{served_memory.base_url}/console")
    runs, counts = panel(page, "runs"), panel(page, "counts")
    runs.get_by_role("link", name="run-1").wait_for()
    connected(page)

    runs.get_by_role("link", name="run-1").focus()
    started_run(api, "run-2")
    runs.get_by_role("link", name="run-2").wait_for()
    on_the_link = page.evaluate("document.activeElement.textContent.trim()")
    counts.locator("[data-status=all]").focus()
    store.finish_run("run-1", status="completed", final_output={"ok": True})
    counts.locator("[data-status=completed]").wait_for()
    on_the_chip = page.evaluate("document.activeElement.dataset.status")

    assert (on_the_link, on_the_chip) == ("run-1", "all")


def test_public_reads_need_no_token_but_answering_does(
    open_page: Any, shared_host: SharedHost
) -> None:
    for served in serving(shared_host, "memory://", public_reads=True):
        started_run(served.api, "run-1")
        served.store.request_human_decision(
            "run-1",
            node_id="ship",
            attempt_id="ship-1",
            request={"title": "Ship?", "choices": ["ship"]},
        )
        page = open_page(run_url(served, "run-1"), token=False)
        panel(page, "answer-locked").wait_for()

        assert panel(page, "token-prompt").count() == 0
        assert panel(page, "answer-form").count() == 0
        assert "Ship?" in panel(page, "decision").inner_text()
        assert page.locator("#token-button").inner_text() == "Sign in"
