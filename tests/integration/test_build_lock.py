"""The build lock of a projection, on every backend's view store: one holder at a time, taken
over once its lease ran out or its process (on this host) is gone."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger.domain.errors import StorageUnavailableError
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.views.rebuild import _Lock
from runledger.infrastructure.views.store import ViewStore

NAME = "runs"


@pytest.fixture
def views(store_url: str) -> Iterator[ViewStore]:
    with open_runtime(store_url, embedded_projections=False) as runtime:
        yield runtime.views


def gone_process_owner() -> str:
    """A lock owner naming a process of this host that has ended."""
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return f"{socket.gethostname()}:{int(ended.stdout)}:token"


def test_a_second_owner_is_told_who_holds_the_lock(views: ViewStore) -> None:
    assert views.try_lock(NAME, "host:1:first", lease_seconds=60) is None

    assert views.try_lock(NAME, "host:2:second", lease_seconds=60) == "host:1:first"


def test_the_holder_renews_its_own_lock(views: ViewStore) -> None:
    views.try_lock(NAME, "host:1:first", lease_seconds=60)

    assert views.try_lock(NAME, "host:1:first", lease_seconds=60) is None


def test_a_released_lock_is_free(views: ViewStore) -> None:
    views.try_lock(NAME, "host:1:first", lease_seconds=60)
    views.unlock(NAME, "host:1:first")

    assert views.try_lock(NAME, "host:2:second", lease_seconds=60) is None


def test_only_the_holder_releases_the_lock(views: ViewStore) -> None:
    views.try_lock(NAME, "host:1:first", lease_seconds=60)
    views.unlock(NAME, "host:2:second")

    assert views.try_lock(NAME, "host:2:second", lease_seconds=60) == "host:1:first"


def test_locks_of_two_projections_are_apart(views: ViewStore) -> None:
    views.try_lock(NAME, "host:1:first", lease_seconds=60)

    assert views.try_lock("terminal_data", "host:2:second", lease_seconds=60) is None


def test_a_lock_whose_lease_ran_out_is_taken_over(views: ViewStore, store_url: str) -> None:
    if store_url == "memory://":
        pytest.skip("one process holds a memory store: its locks have no lease")
    views.try_lock(NAME, "elsewhere:1:first", lease_seconds=-1)

    assert views.try_lock(NAME, "host:2:second", lease_seconds=60) is None


def test_a_lock_held_by_a_gone_process_of_this_host_is_taken_over(
    views: ViewStore, store_url: str
) -> None:
    if store_url == "memory://":
        pytest.skip("one process holds a memory store: its holders cannot be gone")
    views.try_lock(NAME, gone_process_owner(), lease_seconds=600)

    assert views.try_lock(NAME, "host:2:second", lease_seconds=60) is None


def test_a_lock_held_by_an_ended_but_unreaped_process_is_taken_over(
    views: ViewStore, store_url: str
) -> None:
    """A killed rebuild's groups are orphans; where nothing reaps orphans they stay zombies."""
    if store_url == "memory://":
        pytest.skip("one process holds a memory store: its holders cannot be gone")
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while Path(f"/proc/{zombie.pid}/stat").read_bytes().rpartition(b")")[2].split()[0] != b"Z":
            time.sleep(0.01)
        views.try_lock(NAME, f"{socket.gethostname()}:{zombie.pid}:token", lease_seconds=600)

        assert views.try_lock(NAME, "host:2:second", lease_seconds=60) is None
    finally:
        zombie.wait()


def test_a_lock_held_by_a_live_process_of_another_host_holds(
    views: ViewStore, store_url: str
) -> None:
    views.try_lock(NAME, "elsewhere:1:first", lease_seconds=600)

    assert views.try_lock(NAME, "host:2:second", lease_seconds=60) == "elsewhere:1:first"


class _EndedSessions:
    """The view store as a build meets it after the server ended its sessions: the first
    unlock of each name named in ``failing`` (every one of ``twice`` fails twice) meets an
    ended session, as a pooled connection can once the server ended it."""

    def __init__(self, views: ViewStore, failing: set[str], twice: set[str]) -> None:
        self.release = views.unlock
        self.failures = {name: 2 if name in twice else 1 for name in failing}

    def unlock(self, name: str, owner: str) -> None:
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            raise StorageUnavailableError("the server ended the session", "test")
        self.release(name, owner)


BUILT = ["runs", "session_outbox", "terminal_data"]


def test_a_build_releases_its_locks_past_a_session_the_server_ended(
    views: ViewStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = _Lock(views, BUILT, lease_seconds=60)
    lock.take(wait=False)
    monkeypatch.setattr(views, "unlock", _EndedSessions(views, set(BUILT), set()).unlock)

    lock.release()

    # The next build, of another owner in this very process, takes every lock at once.
    _Lock(views, BUILT, lease_seconds=60).take(wait=False)


def test_a_lock_that_cannot_be_released_leaves_the_others_free_and_says_so(
    views: ViewStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = _Lock(views, BUILT, lease_seconds=60)
    lock.take(wait=False)
    ended = _EndedSessions(views, {"runs"}, {"runs"})
    monkeypatch.setattr(views, "unlock", ended.unlock)

    with pytest.raises(StorageUnavailableError):
        lock.release()

    assert ended.failures == {"runs": 0}
    assert views.try_lock("runs", "host:2:second", lease_seconds=60) == lock.owner
    for name in ("session_outbox", "terminal_data"):
        assert views.try_lock(name, "host:2:second", lease_seconds=60) is None
