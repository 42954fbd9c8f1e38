"""The store's blocking calls run on a fixed set of threads: clients that come and go never
leave SQLite connections (and their descriptors) behind."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from runledger.infrastructure.serve.threads import SERVE_THREADS
from tests.serve.conftest import TOKEN, EventStream, Served, SharedHost, serving, started_run

STREAMS = 200
AT_ONCE = 50
DESCRIPTORS_PER_CONNECTION = 3
"""A SQLite connection in WAL mode holds the database, its ``-wal`` and its ``-shm`` open."""
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served_file(shared_host: SharedHost, tmp_path: Path) -> Iterator[tuple[Served, Path]]:
    path = tmp_path / "runledger.db"
    for served in serving(shared_host, f"sqlite:///{path}"):
        yield served, path


def descriptors_on(path: Path) -> int:
    """How many of this process's descriptors (/proc/self/fd) are open on the store's files."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    count = 0
    for descriptor in os.listdir("/proc/self/fd"):
        # The descriptor that listed the folder is closed by now: it has no link to read.
        with contextlib.suppress(FileNotFoundError):
            count += os.readlink(f"/proc/self/fd/{descriptor}") in names
    return count


def open_and_leave(client: httpx.Client) -> None:
    """A viewer that opens the stream, sees it open, and goes away (its connection closes)."""
    with client.stream("GET", "/runs/run-1/viewer?after_revision=1") as response:
        EventStream(response).wait_open()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_streams_that_come_and_go_leave_no_more_connections_than_the_threads(
    served_file: tuple[Served, Path],
) -> None:
    served, path = served_file
    started_run(served.api)
    before = descriptors_on(path)

    limits = httpx.Limits(max_connections=AT_ONCE)
    with (
        httpx.Client(base_url=served.base_url, headers=HEADERS, limits=limits) as client,
        ThreadPoolExecutor(AT_ONCE) as viewers,
    ):
        list(viewers.map(lambda _: open_and_leave(client), range(STREAMS)))
    served.api.ok("list_runs")
    after = descriptors_on(path)

    assert after - before <= SERVE_THREADS * DESCRIPTORS_PER_CONNECTION, (before, after)
