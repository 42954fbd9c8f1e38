"""A build's read-ahead: the page asked for is the page taken, reads never overlap, a read
nobody takes is waited for and its error left to the next read, and closing waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import orjson
import pytest

from runledger.domain.errors import StorageUnavailableError
from runledger.domain.packed_state import ZSTD_V1, packed
from runledger.domain.ports import LogEntry
from runledger.infrastructure.views.read_ahead import ReadAhead


class Log:
    """Pages of ten entries after a position; records each read and any overlap."""

    def __init__(self, *, fail_after: int | None = None, delay: float = 0.0) -> None:
        self.reads: list[int] = []
        self.threads: set[str] = set()
        self.overlapped = False
        self._reading = threading.Lock()
        self._fail_after = fail_after
        self._delay = delay

    def read(self, after: int) -> Sequence[LogEntry]:
        if not self._reading.acquire(blocking=False):
            self.overlapped = True
            self._reading.acquire()
        try:
            self.threads.add(threading.current_thread().name)
            time.sleep(self._delay)
            self.reads.append(after)
            if after == self._fail_after:
                raise StorageUnavailableError("the server went away", "127.0.0.1:5432")
            return [
                LogEntry(position, "run.created", "id", 1, b"{}")
                for position in range(after + 1, after + 11)
            ]
        finally:
            self._reading.release()


def test_the_page_asked_for_is_the_page_taken_read_on_another_thread() -> None:
    log = Log()
    with ReadAhead(log.read) as pages:
        pages.ask(10)
        page = pages.take(10)
    assert page is not None
    assert [entry.position for entry in page] == list(range(11, 21))
    assert log.reads == [10]
    assert log.threads == {"runledger-read-ahead_0"}


def test_nothing_asked_is_nothing_taken() -> None:
    with ReadAhead(Log().read) as pages:
        assert pages.take(0) is None


def test_a_page_asked_elsewhere_is_waited_for_and_dropped() -> None:
    log = Log(delay=0.05)
    with ReadAhead(log.read) as pages:
        pages.ask(10)
        assert pages.take(5) is None
        # The dropped read ended before take returned: the caller reads alone now.
        assert log.reads == [10]
        assert pages.take(10) is None, "a dropped read is not taken later"


def test_a_failed_read_raises_where_its_page_is_taken() -> None:
    log = Log(fail_after=10)
    with ReadAhead(log.read) as pages:
        pages.ask(10)
        with pytest.raises(StorageUnavailableError):
            pages.take(10)


def test_a_failed_read_nobody_takes_is_not_raised() -> None:
    log = Log(fail_after=10)
    with ReadAhead(log.read) as pages:
        pages.ask(10)
        assert pages.take(20) is None
    assert log.reads == [10]


def test_reads_never_overlap_and_closing_waits_for_the_last() -> None:
    log = Log(delay=0.01)
    with ReadAhead(log.read) as pages:
        for after in range(0, 100, 10):
            pages.ask(after)
        # Each ask waited for the read before it: ten reads, one at a time.
    assert log.reads == list(range(0, 100, 10))
    assert not log.overlapped


def test_a_page_taken_holds_its_payloads_unpacked_and_its_entries_otherwise_as_read() -> None:
    payloads = [orjson.dumps({"n": n, "text": "check the edge cases " * 8}) for n in range(3)]
    stored = [packed(payload) for payload in payloads]
    assert {form[0] for form in stored} == {ZSTD_V1}
    entries = [
        LogEntry(position, "follow-up.queued", f"id-{position}", 1, form)
        for position, form in enumerate([*stored, b'{"plain": true}'], start=1)
    ]
    with ReadAhead(lambda after: entries) as pages:
        pages.ask(0)
        page = pages.take(0)

    assert page is not None
    assert [entry.state for entry in page] == [*payloads, b'{"plain": true}']
    assert [entry[:4] for entry in page] == [entry[:4] for entry in entries]
