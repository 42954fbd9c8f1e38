"""Aggregate locks shared by every process and thread using one SQLite file.

A SQLite file has one writer at a time, but a command reads its aggregates before it takes
the write lock, so on a hot run the writers of several processes could each keep losing the
race between their reads and their insert: a loaded machine saw one spend all its attempts.
A command that conflicted runs again holding its aggregates, as on PostgreSQL: here by POSIX
record locks on bytes of a file beside the database (one byte per stripe of aggregate ids;
the kernel releases them when a process dies), and a thread lock per stripe.

A holder that lost several conflicts goes first (``holding(first=True)``): the saves of
writers that hold nothing give way to it (``give_way``), which they would not to a plain
holder.

Record locks belong to the process, not to a descriptor: they do not keep the process's own
threads apart, and closing any descriptor of the file drops them all. So every storage of one
process on one file shares one descriptor and one set of thread locks (``_SharedFile``).
"""

from __future__ import annotations

import errno
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
FIRST_OFFSET: Final = STRIPES
"""Where the bytes of holders that go first begin: stripe ``s``'s is ``FIRST_OFFSET + s``."""


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
    def holding(self, aggregate_ids: Sequence[UUID], *, first: bool = False) -> Iterator[None]:
        """Hold these aggregates (none: nothing) until the block ends, taken in one order
        (stripe by stripe, ascending), so two holders never wait for each other in a ring.

        ``first``: the holder has lost several conflicts and goes first: it also holds each
        stripe's second byte (``FIRST_OFFSET`` on, after every stripe's own: still one
        order), and a save of another process or thread that writes one of these aggregates
        is refused (``give_way``) until the block ends."""
        stripes = sorted({_stripe(i) for i in aggregate_ids})
        if first:
            stripes += [FIRST_OFFSET + stripe for stripe in stripes]
        if not stripes:
            yield
            return
        shared = self._file()
        threads = self._threads if shared is None else shared.threads
        mine = _held_by_this_thread(threads)
        with ExitStack() as held:
            for stripe in stripes:
                with _FILES_GUARD:
                    lock = threads.setdefault(stripe, threading.Lock())
                held.enter_context(lock)
                if shared is not None:
                    held.enter_context(_record_lock(shared.descriptor, stripe))
                mine.add(stripe)
                held.callback(mine.discard, stripe)
            yield

    def give_way(self, aggregate_ids: Sequence[UUID]) -> None:
        """``AggregateHeldError`` when a holder that goes first (``holding(first=True)``,
        another process or thread) holds one of these aggregates; called before a save.

        A holder's insert otherwise raced the first attempts of other processes, which hold
        nothing, and could lose every time: four processes queueing on one run for 3 s, one
        command in six runs lost all 50 attempts. Holding every save's aggregates for it
        would be fair as well, but runs the processes' commands one at a time (measured
        slower, see "Hot runs take turns" in the README); a holder that goes first is rare.
        The check takes each byte without waiting and lets it go at once, so it never waits
        for a holder (no ring), nor keeps one waiting for more than the check."""
        shared = self._file()
        threads = self._threads if shared is None else shared.threads
        mine = _held_by_this_thread(threads)
        for stripe in sorted({FIRST_OFFSET + _stripe(i) for i in aggregate_ids} - mine):
            with _FILES_GUARD:
                lock = threads.setdefault(stripe, threading.Lock())
            # Taken while the file's byte is tried: no thread of this process holds the
            # byte then, so letting it go releases nothing of this process's (record locks
            # belong to the process, not to the thread).
            if not lock.acquire(blocking=False):
                raise AggregateHeldError
            try:
                if shared is not None:
                    _try_record_lock(shared.descriptor, stripe)
            finally:
                lock.release()

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


class AggregateHeldError(Exception):
    """A holder that goes first holds an aggregate this save writes (``give_way``)."""


def _stripe(aggregate_id: UUID) -> int:
    return zlib.crc32(aggregate_id.bytes) % STRIPES


_HELD: Final = threading.local()


def _held_by_this_thread(threads: dict[int, threading.Lock]) -> set[int]:
    """The stripes of this set of thread locks that the calling thread holds."""
    held: dict[int, set[int]] = _HELD.__dict__.setdefault("stripes", {})
    return held.setdefault(id(threads), set())


def _try_record_lock(descriptor: int, stripe: int) -> None:
    """Take and let go of a byte's record lock, or ``AggregateHeldError`` if another
    process holds it."""
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, stripe)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES):
            raise AggregateHeldError from None
        raise
    fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, stripe)


@contextmanager
def _record_lock(descriptor: int, stripe: int) -> Iterator[None]:
    fcntl.lockf(descriptor, fcntl.LOCK_EX, 1, stripe)
    try:
        yield
    finally:
        fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, stripe)
