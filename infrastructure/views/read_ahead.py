"""A build's next page of the log, read on a thread of its own while this page is projected.

A rebuild reads the log one page at a time and waited for each read: on PostgreSQL that
wait was 9 % of a one-process rebuild (py-spy, 50k events), the server working while the
process did nothing. ``ReadAhead`` asks for the page after a full one as soon as that one
is read; the build takes it when it gets there, if it starts where the build goes on (a
conflict or a moved runner goes on elsewhere: the read is waited for and dropped). One read
is under way at a time and each is waited for before the next, so the storage is never
read by two threads at once.

The thread also unpacks the page's payloads (``packed_state.unpacked_all``): the page's zstd
frames go to one call that lets go of the GIL, so the projecting thread goes on meanwhile and
only parses JSON. It took a one-process rebuild of the bench history on PostgreSQL from 28.2k
to 31.8k events/s (three alternated pairs of three turns). Unpacking each entry on its own
there gained nothing: between its short calls the thread waited for the GIL. A page holds at
most ``UNPACKED_BYTES`` unpacked (the bench history's pages of 4,000 events hold about 2 MB);
the payloads after that stay packed, for the decode to unpack one at a time as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Final

from runledger.domain.packed_state import unpacked_all
from runledger.domain.ports import LogEntry

UNPACKED_BYTES: Final = 16 * 1024 * 1024
"""The most payload bytes a page read ahead holds unpacked."""

Reader = Callable[[int], Sequence[LogEntry]]
"""The page of the log after a position."""


class ReadAhead:
    """The page after ``after`` (``ask``), read beside the caller; ``take`` it or not."""

    def __init__(self, read: Reader) -> None:
        self._read = read
        self._threads = ThreadPoolExecutor(1, thread_name_prefix="runledger-read-ahead")
        self._pending: tuple[int, Future[Sequence[LogEntry]]] | None = None

    def ask(self, after: int) -> None:
        """Start reading the page after ``after`` (after the read under way ends)."""
        self._drop()
        self._pending = (after, self._threads.submit(self._read_unpacked, after))

    def _read_unpacked(self, after: int) -> Sequence[LogEntry]:
        entries = self._read(after)
        states = unpacked_all([entry.state for entry in entries], max_bytes=UNPACKED_BYTES)
        return [
            entry if state is entry.state else entry._replace(state=state)
            for entry, state in zip(entries, states, strict=True)
        ]

    def take(self, after: int) -> Sequence[LogEntry] | None:
        """The page after ``after`` if that is the one being read (its error if it failed);
        None if no read was asked for there."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        asked, future = pending
        if asked != after:
            _wait(future)
            return None
        return future.result()

    def _drop(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            _wait(pending[1])

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._drop()
        self._threads.shutdown(wait=True)


def _wait(future: Future[Sequence[LogEntry]]) -> None:
    """Wait for a read nobody will take; its error, if any, is the next read's to meet."""
    future.exception()
