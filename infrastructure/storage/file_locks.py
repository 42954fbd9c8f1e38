"""Aggregate locks shared by every process and thread using one SQLite file.

A SQLite file has one writer at a time, but a command reads its aggregates before it takes
the write lock, so on a hot run the writers of several processes could each keep losing the
race between their reads and their insert: a loaded machine saw one spend all its attempts.
A command that conflicted runs again holding its aggregates, as on PostgreSQL: here by POSIX
record locks on bytes of a file beside the database (one byte per stripe of aggregate ids;
the kernel releases them when a process dies), and a thread lock per stripe.

Record locks belong to the process, not to a descriptor: they do not keep the process's own
threads apart, and closing any descriptor of the file drops them all. So every storage of one
process on one file shares one descriptor and one set of thread locks (``_SharedFile``).
"""

from __future__ import annotations

import fcntl
import os
import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Final
from uuid import UUID

STRIPES: Final = 4096
"""Bytes of the lock file: two aggregates share a lock only if their ids fall on one."""


class _SharedFile:
    """This process's descriptor of one lock file and its thread locks, with its users."""

    def __init__(self, path: str) -> None:
        # Owner-only, as the database itself: the file holds no data, only locks.
        self.descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.users = 0
        self.threads: dict[int, threading.Lock] = {}


_FILES: dict[str, _SharedFile] = {}
_FILES_GUARD = threading.Lock()


class AggregateLocks:
    """Exclusive locks on aggregates, across the processes sharing ``path`` (None: a
    database no other process or storage can open, whose threads alone need keeping apart)."""

    def __init__(self, path: str | None) -> None:
        self.path = None if path is None else os.path.realpath(path)
        self._shared: _SharedFile | None = None
        self._threads: dict[int, threading.Lock] = {}

    @contextmanager
    def holding(self, aggregate_ids: Sequence[UUID]) -> Iterator[None]:
        """Hold these aggregates (none: nothing) until the block ends, taken in one order
        (stripe by stripe, ascending), so two holders never wait for each other in a ring."""
        stripes = sorted({zlib.crc32(i.bytes) % STRIPES for i in aggregate_ids})
        if not stripes:
            yield
            return
        shared = self._file()
        threads = self._threads if shared is None else shared.threads
        with ExitStack() as held:
            for stripe in stripes:
                with _FILES_GUARD:
                    lock = threads.setdefault(stripe, threading.Lock())
                held.enter_context(lock)
                if shared is not None:
                    held.enter_context(_record_lock(shared.descriptor, stripe))
            yield

    def close(self) -> None:
        """Stop using the lock file (closed with its last user in this process)."""
        with _FILES_GUARD:
            shared, self._shared = self._shared, None
            if shared is None or self.path is None:
                return
            shared.users -= 1
            if shared.users == 0:
                del _FILES[self.path]
                os.close(shared.descriptor)

    def _file(self) -> _SharedFile | None:
        if self.path is None:
            return None
        with _FILES_GUARD:
            if self._shared is None:
                shared = _FILES.get(self.path)
                if shared is None:
                    shared = _FILES[self.path] = _SharedFile(self.path)
                shared.users += 1
                self._shared = shared
            return self._shared


@contextmanager
def _record_lock(descriptor: int, stripe: int) -> Iterator[None]:
    fcntl.lockf(descriptor, fcntl.LOCK_EX, 1, stripe)
    try:
        yield
    finally:
        fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, stripe)
