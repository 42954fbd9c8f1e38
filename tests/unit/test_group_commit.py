"""The group-commit queue on its own, over an in-memory log: who commits with whom, what each
writer gets back, and what a failed group does. The backends' use of it is tested in
``tests/integration/test_group_commit.py``."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError, StoredEvent

from runledger.infrastructure.commits.group_commit import GroupCommit
from runledger.infrastructure.commits.ports import Fence, SameCommit
from tests.support.writer_threads import WAIT_SECONDS, Writer, finish, start_in_line


def stored(originator_id: UUID | None = None, version: int = 1) -> StoredEvent:
    return StoredEvent(
        originator_id=originator_id or uuid4(), originator_version=version, topic="t", state=b"{}"
    )


class Log:
    """A log whose first write waits for ``release``; it fails writes as told."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []
        self.writes: list[int] = []
        """The size of each batch written, in order (failed ones too)."""
        self.entered = threading.Event()
        self.release = threading.Event()
        self.failing: type[Exception] | None = None
        self.refused: set[UUID] = set()

    def write(
        self, batch: Sequence[StoredEvent], step: SameCommit | None, fences: Sequence[Fence] = ()
    ) -> list[int]:
        del fences
        self.writes.append(len(batch))
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT_SECONDS)
        written = False
        try:
            if self.failing is not None and len(batch) > 1:
                raise self.failing("the log failed")
            if any(s.originator_id in self.refused for s in batch):
                raise IntegrityError("refused")
            first = len(self.events) + 1
            self.events.extend(batch)
            positions = list(range(first, first + len(batch)))
            if step is not None:
                written = step.prepare(batch, positions) and step.write(None)
        except BaseException:
            if step is not None:
                step.settle(False)
            raise
        if step is not None:
            step.settle(written)
        return positions


class Step:
    """A read-model step that records what it was asked."""

    def __init__(self) -> None:
        self.prepared: list[list[int]] = []
        self.settled: list[bool] = []

    def catch_up(self) -> None:
        pass

    def next_position(self) -> int | None:
        return None

    def prepare(self, stored_events: Sequence[StoredEvent], positions: Sequence[int]) -> bool:
        del stored_events
        self.prepared.append(list(positions))
        return True

    def write(self, cursor: Any) -> bool:
        del cursor
        return True

    def settle(self, written: bool) -> None:
        self.settled.append(written)


def writer(group: GroupCommit, batch: list[StoredEvent], step: Any = None) -> Writer:
    return Writer(group.insert, batch, step)


def behind_a_held_leader(log: Log, group: GroupCommit, writers: list[Writer]) -> Writer:
    """Start a leader that waits inside its write, queue ``writers`` behind it in order,
    release it and wait for everyone; the leader."""
    leader = writer(group, [stored()])
    leader.start()
    assert log.entered.wait(WAIT_SECONDS)
    start_in_line(writers, lambda: group.queued, ahead=1)
    log.release.set()
    finish(leader, *writers)
    return leader


def test_a_lone_writer_commits_alone_at_once() -> None:
    log = Log()
    log.entered.set()
    group = GroupCommit(log.write)

    assert group.insert([stored(), stored()], None) == [1, 2]
    assert group.insert([stored()], None) == [3]
    assert (group.stats.batches, group.stats.requests, log.writes) == (2, 2, [2, 1])


def test_writers_behind_a_commit_go_in_one_batch_and_get_their_own_positions() -> None:
    log = Log()
    group = GroupCommit(log.write)
    writers = [writer(group, [stored(), stored()]) for _ in range(3)]

    behind_a_held_leader(log, group, writers)

    assert log.writes == [1, 6]
    assert [w.positions for w in writers] == [[2, 3], [4, 5], [6, 7]]
    assert [s.originator_id for w in writers for s in w.batch] == [
        s.originator_id for s in log.events[1:]
    ]


def test_one_step_projects_the_group_and_every_writer_learns_the_outcome() -> None:
    log = Log()
    group = GroupCommit(log.write)
    steps = [Step(), None, Step()]
    writers = [writer(group, [stored()], step) for step in steps]

    behind_a_held_leader(log, group, writers)

    first, _, last = steps
    assert first is not None
    assert last is not None
    assert first.prepared == [[2, 3, 4]]
    assert last.prepared == []
    assert first.settled == last.settled == [True]


def test_a_refused_request_fails_alone_and_the_others_commit() -> None:
    log = Log()
    group = GroupCommit(log.write)
    refused = uuid4()
    log.refused.add(refused)
    writers = [
        writer(group, [stored()]),
        writer(group, [stored(refused)]),
        writer(group, [stored()]),
    ]

    behind_a_held_leader(log, group, writers)

    assert log.writes == [1, 3, 1, 1, 1]
    assert [type(w.error) for w in writers] == [type(None), IntegrityError, type(None)]
    assert [w.positions for w in writers] == [[2], None, [3]]


@pytest.mark.parametrize("failure", [OperationalError, InterfaceError])
def test_a_storage_failure_fails_the_group_once_not_each_in_turn(
    failure: type[Exception],
) -> None:
    log = Log()
    log.failing = failure
    group = GroupCommit(log.write)
    writers = [writer(group, [stored()]) for _ in range(3)]

    behind_a_held_leader(log, group, writers)

    assert log.writes == [1, 3]
    assert all(isinstance(w.error, failure) for w in writers)
    assert len(log.events) == 1


def test_writers_of_one_aggregate_and_batches_past_the_limit_wait_for_the_next_group() -> None:
    log = Log()
    group = GroupCommit(log.write, max_events=4)
    shared = uuid4()
    writers = [
        writer(group, [stored(shared, 1)]),
        writer(group, [stored(shared, 2)]),
        writer(group, [stored(), stored()]),
        writer(group, [stored(), stored()]),
    ]

    behind_a_held_leader(log, group, writers)

    # The leader; the aggregate's first; its second with the next (3 events; 5 would pass 4);
    # the last.
    assert log.writes == [1, 1, 3, 2]
    assert [w.error for w in writers] == [None] * 4


def test_turned_off_every_writer_commits_alone() -> None:
    log = Log()
    group = GroupCommit(log.write)
    group.grouping = False

    behind_a_held_leader(log, group, [writer(group, [stored()]) for _ in range(3)])

    assert log.writes == [1, 1, 1, 1]
    assert group.stats.batches == group.stats.requests == 4
