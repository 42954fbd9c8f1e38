"""A writer thread for group-commit tests: one insert on a thread of its own, keeping its
positions or its error."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent

Insert = Callable[[Sequence[StoredEvent], Any], Sequence[int] | None]
"""Inserts a batch with a read-model step (or None); the positions."""

WAIT_SECONDS = 10
"""How long a test waits for a writer to queue or end before it fails."""


class Writer(threading.Thread):
    """Runs ``insert(batch, step)`` once when started."""

    def __init__(self, insert: Insert, batch: Sequence[StoredEvent], step: Any = None) -> None:
        super().__init__(daemon=True)
        self.insert = insert
        self.batch = batch
        self.step = step
        self.positions: list[int] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.positions = list(self.insert(self.batch, self.step) or [])
        except Exception as error:
            self.error = error


def start_in_line(writers: Sequence[Writer], queued: Callable[[], int], *, ahead: int) -> None:
    """Start each writer once the one before has joined the queue (``queued()`` counts it,
    with the ``ahead`` already there), so they queue in this order."""
    for number, writer in enumerate(writers, start=ahead + 1):
        writer.start()
        deadline = time.monotonic() + WAIT_SECONDS
        while queued() < number:
            assert time.monotonic() < deadline, "a writer did not join the queue"
            time.sleep(0.001)


def finish(*writers: Writer) -> None:
    """Wait for every writer to end."""
    for writer in writers:
        writer.join(WAIT_SECONDS)
        assert not writer.is_alive(), "a writer did not end"
