"""A build's committer process (``views.committer``), on SQLite and PostgreSQL: pages it
encodes and commits give the views a build in one process gives; a page it refuses raises in
the build and writes nothing; a committer that dies or never starts leaves the build to
commit its own pages; it ends with the process that started it, and it never runs the
host's ``__main__`` again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.views import rebuild
from runledger.infrastructure.views.committer import Committer, CommitterError
from runledger.infrastructure.views.rebuild import BUILD_CACHE_ROWS, BUILD_PAGE_SIZE
from runledger.infrastructure.views.store import PageRows, TrackingConflictError
from tests.integration.test_parallel_rebuild import dump

EVENTS = 3 * BUILD_PAGE_SIZE + 500
"""Four pages of a build, more rows than its cache keeps (``BUILD_CACHE_ROWS``): rows it
evicted are read back from the store while the committer holds the page after them."""
READY_SECONDS = 60.0


def _filled(url: str) -> None:
    with open_runtime(url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(seed=5, prefix="committer").batches(EVENTS):
            runtime.storage.events.insert_events(batch)


@pytest.fixture
def filled_url(durable_url: str) -> str:
    """A SQLite file or a PostgreSQL database holding a history of ``EVENTS`` events."""
    _filled(durable_url)
    return durable_url


@pytest.fixture
def runtime(filled_url: str) -> Iterator[StoreRuntime]:
    with open_runtime(filled_url, embedded_projections=False) as opened:
        yield opened


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many projections' pages each page sent to a committer held."""
    pages: list[int] = []
    original = Committer.send

    def counted(self: Committer, rows: Any) -> None:
        pages.append(len(rows))
        original(self, rows)

    monkeypatch.setattr(Committer, "send", counted)
    return pages


def _ready(runtime: StoreRuntime) -> Committer:
    committer = runtime.builds.start_committer()
    assert committer is not None
    assert committer.ready(timeout=READY_SECONDS), "the committer started"
    return committer


def test_a_build_through_the_committer_gives_the_views_built_incrementally(
    runtime: StoreRuntime, sent: list[int]
) -> None:
    runtime.catch_up()
    incremental = dump(runtime)
    assert sum(map(len, incremental.values())) > BUILD_CACHE_ROWS
    _ready(runtime)

    read = runtime.rebuild_projections()

    assert read == runtime.storage.max_position()
    assert len(sent) >= 4, "every page of the build went through the committer"
    assert dump(runtime) == incremental
    outcomes = runtime.rebuild_blue_green()
    assert [(o.compared, o.equal) for o in outcomes] == [("rows", True)] * len(outcomes)
    assert len(sent) >= 8


def test_a_build_starts_the_committer_only_with_enough_events_ahead(
    runtime: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert EVENTS < rebuild.COMMITTER_FROM_EVENTS
    runtime.rebuild_projections()
    assert runtime.builds.committer is None

    monkeypatch.setattr(rebuild, "COMMITTER_FROM_EVENTS", EVENTS)
    runtime.rebuild_projections()

    committer = runtime.builds.committer
    assert committer is not None
    assert committer.ready(timeout=READY_SECONDS)


def test_memory_builds_commit_their_own_pages() -> None:
    with open_runtime("memory://", embedded_projections=False) as runtime:
        assert runtime.builds.start_committer() is None


def _page(runtime: StoreRuntime, name: str, rows: Any, expected: int = 0) -> PageRows:
    projection = runtime.projector.runner(name).projection
    slot = runtime.views.begin_build(projection, restart=True)
    return PageRows(name, expected, slot.position + 1, rows, slot)


def test_a_page_the_committer_refuses_raises_in_the_build_and_writes_nothing(
    runtime: StoreRuntime,
) -> None:
    committer = _ready(runtime)
    [table] = [t for t in runtime.projector.runner("runs").projection.tables if t.name == "rl_runs"]
    unknown = {"run_id": "r1", "no such column": 1}
    page = _page(runtime, "runs", {table.name: {("r1",): unknown}})

    committer.send([page])
    with pytest.raises(CommitterError, match="no such column"):
        committer.settle()
    assert runtime.views.reader({"runs": page.slot}).scan(table) == []

    moved = _page(runtime, "runs", {table.name: {("r1",): None}}, expected=7)
    committer.send([moved])
    with pytest.raises(TrackingConflictError) as conflict:
        committer.settle()
    assert (conflict.value.name, conflict.value.expected, conflict.value.actual) == ("runs", 7, 0)

    # The committer goes on: a sound page commits.
    sound = _page(runtime, "runs", {table.name: {("r1",): None}})
    committer.send([sound])
    committer.settle()
    assert not committer.broken


def test_a_killed_committer_leaves_the_build_to_commit_its_own_pages_and_is_started_again(
    runtime: StoreRuntime,
    monkeypatch: pytest.MonkeyPatch,
    sent: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime.catch_up()
    incremental = dump(runtime)
    first = _ready(runtime)
    pages = Committer.send

    def killed_after_two(self: Committer, rows: Any) -> None:
        if len(sent) == 2:
            os.kill(self.pid, signal.SIGKILL)
            self._process.wait()
        pages(self, rows)

    monkeypatch.setattr(Committer, "send", killed_after_two)

    read = runtime.rebuild_projections()

    assert first.broken
    assert "the build commits its pages" in caplog.text
    assert read == runtime.storage.max_position()
    assert dump(runtime) == incremental
    monkeypatch.setattr(rebuild, "COMMITTER_FROM_EVENTS", 0)
    second = _ready(runtime)
    assert second is not first
    before = len(sent)
    runtime.rebuild_projections()
    assert len(sent) > before, "the second committer took the build's pages"
    assert dump(runtime) == incremental


def test_a_committer_that_cannot_open_the_store_leaves_the_build_its_own_pages(
    tmp_path: Path, filled_url: str, sent: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = (
        f"sqlite:///{tmp_path / 'nowhere' / 'none.db'}"
        if filled_url.startswith("sqlite")
        else _with_password(filled_url, "/runledger_no_such_database")
    )
    missing = Committer(nowhere)
    try:
        assert not missing.ready(timeout=READY_SECONDS)
        assert missing.broken
    finally:
        missing.close()
    assert "did not start" in caplog.text
    assert SECRET not in caplog.text
    with open_runtime(filled_url, embedded_projections=False) as runtime:
        runtime.catch_up()
        incremental = dump(runtime)
        runtime.builds._committer_url = nowhere
        runtime.builds.start_committer()

        runtime.rebuild_projections()

        assert sent == []
        assert dump(runtime) == incremental


SECRET = "s3cret-committer"


def _with_password(url: str, path: str) -> str:
    """``url`` at another database, with a password (trust auth ignores it)."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.hostname or "127.0.0.1"
    netloc = f"{user}:{SECRET}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc, path=path))


def test_a_committer_that_cannot_be_started_leaves_the_build_its_own_pages(
    runtime: StoreRuntime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runtime.catch_up()
    incremental = dump(runtime)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError("no new processes here")

    monkeypatch.setattr(subprocess, "Popen", refused)
    monkeypatch.setattr(rebuild, "COMMITTER_FROM_EVENTS", 0)

    runtime.rebuild_projections()

    assert runtime.builds.committer is None
    assert "could not start: no new processes here" in caplog.text
    assert dump(runtime) == incremental


HOST = """
import os, sys, time
print("host ran", flush=True)
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.views import rebuild
rebuild.COMMITTER_FROM_EVENTS = 0
runtime = open_runtime(sys.argv[1], embedded_projections=False)
committer = runtime.builds.start_committer()
assert committer.ready(timeout=60)
runtime.rebuild_projections()
print(committer.pid, flush=True)
if sys.argv[2] == "die":
    os.kill(os.getpid(), 9)
runtime.close()
"""


def _host(tmp_path: Path, url: str, end: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(HOST))
    return subprocess.run(
        [sys.executable, str(script), url, end],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_a_host_script_without_a_main_guard_runs_once(tmp_path: Path, filled_url: str) -> None:
    # multiprocessing's spawn would import the script again in the committer, running it.
    host = _host(tmp_path, filled_url, "close")

    assert host.returncode == 0, host.stderr
    assert host.stdout.count("host ran") == 1
    pid = int(host.stdout.split()[-1])
    assert _ended(pid, seconds=10.0), "closing the runtime ended its committer"


def test_a_committer_ends_with_the_process_that_started_it(tmp_path: Path, filled_url: str) -> None:
    host = _host(tmp_path, filled_url, "die")

    assert host.returncode == -signal.SIGKILL
    pid = int(host.stdout.split()[-1])
    assert _ended(pid, seconds=10.0), "the committer outlived its host"


def test_the_committer_gets_the_store_url_on_a_pipe_not_its_command_line(
    runtime: StoreRuntime, filled_url: str
) -> None:
    committer = _ready(runtime)
    command_line = Path(f"/proc/{committer.pid}/cmdline").read_bytes()
    assert b"committer_process" in command_line
    assert filled_url.removeprefix("sqlite:///").encode() not in command_line
    assert b"127.0.0.1" not in command_line


def _ended(pid: int, *, seconds: float) -> bool:
    """Whether ``pid`` is gone (or a zombie no one reaped) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return True
        if "\nState:\tZ" in status:
            return True
        time.sleep(0.05)
    return False
