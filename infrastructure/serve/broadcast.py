"""One broadcaster per server process: it fans each run's new viewer revisions out to clients.

The store tells it when the read models may have advanced (``StoreRuntime.add_views_listener``:
after each commit of this process, and when the follower projects another process's). It then
reads each watched run's new revisions once, keeps the last ``RECENT_REVISIONS`` of them, and
wakes the run's clients, which take what lies beyond their own cursor. A client whose cursor
is older than what the broadcaster kept (it connected with an old cursor, or was too slow)
reads from the store itself: no client is ever skipped a revision.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Final

from runledger.domain.errors import WorkflowError
from runledger.domain.records import SnapshotRequired, ViewerDeltas
from runledger.infrastructure.serve.threads import StoreThreads
from runledger.infrastructure.store import WorkflowStore

RECENT_REVISIONS: Final = 256
KEEPALIVE_SECONDS: Final = 15.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Revision:
    """One presentation revision of a run, with its deltas as JSON."""

    revision: int
    deltas: list[dict[str, Any]]


@dataclass(frozen=True)
class Snapshot:
    """The client's cursor is out of retention: it must reload a snapshot at ``current``."""

    current: int
    retained_from: int


@dataclass(frozen=True)
class Keepalive:
    """Nothing new for a while: a comment keeps proxies and the client's read open."""


Item = Revision | Snapshot | Keepalive


def _revisions(answer: ViewerDeltas) -> list[Revision]:
    return [
        Revision(revision, [delta.model_dump(mode="json") for delta in deltas])
        for revision, deltas in groupby(answer.deltas, key=lambda d: d.presentation_revision)
    ]


@dataclass
class _Channel:
    """The watched state of one run: the revisions read so far and who waits for more."""

    revision: int
    recent: deque[Revision] = field(default_factory=lambda: deque(maxlen=RECENT_REVISIONS))
    waiters: set[asyncio.Event] = field(default_factory=set)


class ViewerBroadcaster:
    """Reads new viewer revisions once per run and change, for every client of that run."""

    def __init__(self, store: WorkflowStore, threads: StoreThreads) -> None:
        self._store = store
        self._threads = threads
        self._channels: dict[str, _Channel] = {}
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pump: asyncio.Task[None] | None = None

    @property
    def clients(self) -> int:
        """Streams open now (read from any thread: a count may be a moment old)."""
        return sum(len(channel.waiters) for channel in list(self._channels.values()))

    def start(self) -> None:
        """Start following (on the server's event loop)."""
        self._loop = asyncio.get_running_loop()
        self._pump = asyncio.create_task(self._follow(), name="runledger-viewer-broadcaster")

    def views_advanced(self) -> None:
        """The store's listener: called on any thread, it only wakes the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._changed.set)

    def close(self) -> None:
        """End every stream (the server is stopping); thread-safe."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._close_now)

    def _close_now(self) -> None:
        self._closed.set()
        for channel in self._channels.values():
            for waiter in channel.waiters:
                waiter.set()

    async def stop(self) -> None:
        """End every stream and the follower task."""
        self._close_now()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)

    async def _follow(self) -> None:
        while not self._closed.is_set():
            await self._changed.wait()
            self._changed.clear()
            for run_id, channel in list(self._channels.items()):
                try:
                    await self._advance(run_id, channel)
                except Exception:
                    # A follower that died would leave every stream silent for good: log the
                    # fault and keep following (the next change reads again).
                    logger.exception("viewer deltas of %s not fanned out", run_id)

    async def _advance(self, run_id: str, channel: _Channel) -> None:
        try:
            answer = await self._threads.run(
                self._store.viewer_deltas, run_id, after_revision=channel.revision
            )
        except WorkflowError as error:
            # The store is briefly unavailable, or closing: the next change tries again, and
            # clients stay on their cursors meanwhile.
            logger.warning("viewer deltas of %s not read: %s", run_id, error.message)
            return
        if isinstance(answer, SnapshotRequired):
            # The broadcaster fell out of retention itself: start over from now; clients
            # behind that find the gap and read the store themselves.
            channel.recent.clear()
            channel.revision = answer.current_revision
        else:
            channel.recent.extend(_revisions(answer))
            channel.revision = answer.current_revision
        for waiter in channel.waiters:
            waiter.set()

    async def stream(self, run_id: str, after_revision: int) -> AsyncIterator[Item]:
        """Every revision of ``run_id`` after the cursor, live, until the server stops.

        The first answer comes from the store before anything is yielded, so an unknown run or
        a bad cursor raises its ``WorkflowError`` while the caller can still answer 4xx.
        """
        waiter = asyncio.Event()
        channel = self._join(run_id, after_revision, waiter)
        try:
            # Joined before reading: a change after this read wakes the waiter, none is missed.
            first = await self._read(run_id, after_revision)
        except BaseException:
            self._leave(run_id, channel, waiter)
            raise
        if not channel.recent and channel.revision < first[1]:
            channel.revision = first[1]
        return self._items(run_id, channel, waiter, first)

    async def _read(self, run_id: str, after_revision: int) -> tuple[list[Item], int]:
        """The store's answer after a cursor, as stream items and the new cursor."""
        answer = await self._threads.run(
            self._store.viewer_deltas, run_id, after_revision=after_revision
        )
        if isinstance(answer, SnapshotRequired):
            snapshot = Snapshot(answer.current_revision, answer.retained_from_revision)
            return [snapshot], answer.current_revision
        return list(_revisions(answer)), answer.current_revision

    async def _items(
        self,
        run_id: str,
        channel: _Channel,
        waiter: asyncio.Event,
        first: tuple[list[Item], int],
    ) -> AsyncIterator[Item]:
        try:
            items, cursor = first
            while True:
                for item in items:
                    yield item
                found = await self._next(run_id, channel, waiter, cursor)
                if found is None:
                    if self._closed.is_set():
                        return
                    items = [Keepalive()]
                else:
                    items, cursor = found
        finally:
            self._leave(run_id, channel, waiter)

    async def _next(
        self, run_id: str, channel: _Channel, waiter: asyncio.Event, cursor: int
    ) -> tuple[list[Item], int] | None:
        """What comes after ``cursor``: the shared revisions, else the store's; None when
        nothing came within the keepalive interval, or the server is stopping."""
        while not self._closed.is_set():
            if channel.revision > cursor:
                kept: list[Item] = [item for item in channel.recent if item.revision > cursor]
                if channel.recent and channel.recent[0].revision <= cursor + 1:
                    return kept, channel.revision
                # The shared revisions start after this cursor: read the store for this client.
                return await self._read(run_id, cursor)
            waiter.clear()
            try:
                await asyncio.wait_for(waiter.wait(), timeout=KEEPALIVE_SECONDS)
            except TimeoutError:
                return None
        return None

    def _join(self, run_id: str, after_revision: int, waiter: asyncio.Event) -> _Channel:
        channel = self._channels.get(run_id)
        if channel is None:
            channel = self._channels[run_id] = _Channel(revision=after_revision)
        channel.waiters.add(waiter)
        return channel

    def _leave(self, run_id: str, channel: _Channel, waiter: asyncio.Event) -> None:
        channel.waiters.discard(waiter)
        if not channel.waiters and self._channels.get(run_id) is channel:
            del self._channels[run_id]


__all__: Sequence[str] = ["Item", "Keepalive", "Revision", "Snapshot", "ViewerBroadcaster"]
