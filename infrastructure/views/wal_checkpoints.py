"""A SQLite build's WAL checkpoints, on a thread of their own.

A commit whose WAL has grown past ``wal_autocheckpoint`` pages copies the WAL into the
database file and syncs it, in the committing thread: a tenth or more of a one-process
rebuild (the bench history of 50k events: 42-44k events/s with them, 48-51k without). A
build's page commits therefore leave checkpoints to a thread of its own, which runs a
``PASSIVE`` checkpoint after each page on a connection of its own. SQLite's C code does the
copying and the syncing with the GIL released, so the build projects the next page
meanwhile, and a passive checkpoint blocks no writer and no reader. Writes of other
connections (commands, live catch-ups) keep their own automatic checkpoints.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from runledger.infrastructure.views.store import PageCommit

logger = logging.getLogger(__name__)


class WalCheckpoints:
    """A thread that checkpoints the WAL of the database at ``path`` when asked."""

    def __init__(self, path: str, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._wanted = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="runledger-wal-checkpoints")
        self._thread.start()

    def _work(self) -> None:
        try:
            connection = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as error:
            _stopped(error)
            return
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._stopping:
                    return
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as error:
            _stopped(error)
        finally:
            connection.close()

    def ask(self) -> None:
        """Checkpoint soon (asks made while one runs make one more)."""
        self._wanted.set()

    def close(self) -> None:
        self._stopping = True
        self._wanted.set()
        self._thread.join()


def _stopped(error: sqlite3.Error) -> None:
    # Time, not data: the WAL grows until a later commit's automatic checkpoint.
    logger.warning("a build's WAL checkpoints stopped early: %s", error)


class CheckpointedCommits:
    """A build's page commits (``views.store.PageCommits``): each commits at once, and asks
    for a checkpoint after it."""

    def __init__(
        self, commit: Callable[[Sequence[PageCommit]], None], checkpoints: WalCheckpoints
    ) -> None:
        self._commit = commit
        self._checkpoints = checkpoints

    def send(self, pages: Sequence[PageCommit]) -> None:
        self._commit(pages)
        self._checkpoints.ask()

    def settle(self) -> None:
        """Each page committed as it was sent."""


@contextmanager
def checkpointed_commits(
    commit: Callable[[Sequence[PageCommit]], None],
    connection: sqlite3.Connection,
    path: str,
    busy_timeout: float,
    autocheckpoint: int,
) -> Iterator[CheckpointedCommits]:
    """Page commits on ``connection`` without its automatic checkpoints for the block, which
    a ``WalCheckpoints`` thread runs instead; ``autocheckpoint`` is restored after."""
    connection.execute("PRAGMA wal_autocheckpoint=0")
    checkpoints = WalCheckpoints(path, busy_timeout)
    try:
        yield CheckpointedCommits(commit, checkpoints)
    finally:
        checkpoints.close()
        connection.execute(f"PRAGMA wal_autocheckpoint={int(autocheckpoint)}")
