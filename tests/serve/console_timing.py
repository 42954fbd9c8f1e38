"""How fast the console first renders a big run and a big runs list, in headless Chromium.

Not a test (timings are never asserted): ``python -m tests.serve.console_timing [--runs N]
[--follow-ups N] [--samples N]`` generates a SQLite store (one run with N follow-ups and N
runs, written as the benchmarks write histories), serves it, opens the pages in the system
Chromium and prints the median and worst of ``performance.mark`` times the page sets:
``console:run-first-render`` (header and the follow-ups' first page), ``console:run-overview``
(every other panel), ``console:runs-render`` (the runs list's first page with its counts).
Each is measured from navigation start, so it includes loading the page and its modules.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.serve.app import create_app
from runledger.infrastructure.serve.auth import Access
from runledger.infrastructure.serve.server import listening_socket
from tests.serve.conftest import TOKEN
from tests.serve.test_console_page import CHROMIUM, CHROMIUM_ARGS, TOKEN_SCRIPT


def generate(url: str, runs: int, follow_ups: int) -> str:
    """Write the history and rebuild every read model; the big run's id."""
    with open_runtime(url, embedded_projections=False) as runtime:
        generator = HistoryGenerator(prefix="timing")
        runtime.storage.events.insert_events(generator.run_events(follow_ups))
        for batch in HistoryGenerator(prefix="listed").created_runs(runs):
            runtime.storage.events.insert_events(batch)
        runtime.rebuild_projections(processes=1)
    return "timing-run-1"


def mark(page: Any, name: str) -> float:
    page.wait_for_function(f"performance.getEntriesByName({name!r}).length > 0", timeout=60_000)
    value: float = page.evaluate(f"performance.getEntriesByName({name!r})[0].startTime")
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--follow-ups", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=5)
    options = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'timing.db'}"
        started = time.perf_counter()
        big_run = generate(url, options.runs, options.follow_ups)
        print(f"generated in {time.perf_counter() - started:.1f} s")
        with open_runtime(url) as runtime:
            sock = listening_socket("127.0.0.1", 0)
            base = f"http://127.0.0.1:{sock.getsockname()[1]}"
            app = create_app(runtime, Access(TOKEN))
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
            thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
            thread.start()
            while not server.started:
                time.sleep(0.05)
            times: dict[str, list[float]] = {}
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
                )
                for sample in range(options.samples + 1):
                    context = browser.new_context(viewport={"width": 1440, "height": 900})
                    context.add_init_script(TOKEN_SCRIPT)
                    page = context.new_page()
                    page.goto(f"{base}/console/runs/{big_run}")
                    first, overview = (
                        mark(page, "console:run-first-render"),
                        mark(page, "console:run-overview"),
                    )
                    page.goto(f"{base}/console")
                    listed = mark(page, "console:runs-render")
                    context.close()
                    if sample == 0:
                        continue  # the first sample warms the server's caches and the browser's
                    for name, value in (
                        (f"run with {options.follow_ups:,} follow-ups: first render", first),
                        (f"run with {options.follow_ups:,} follow-ups: every panel", overview),
                        (f"runs list of {options.runs + 1:,} runs: first page", listed),
                    ):
                        times.setdefault(name, []).append(value)
                browser.close()
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.0f} ms, worst {max(values):.0f} ms")


if __name__ == "__main__":
    main()
