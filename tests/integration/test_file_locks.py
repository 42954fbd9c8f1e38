"""The SQLite backend's aggregate locks: held by one process or thread, another waits for
them until they are given back; other aggregates are not held up; and a command that
conflicted runs holding them (``SQLiteStorage.lock_aggregates``)."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
import time
import zlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

import pytest

from runledger.infrastructure.storage.file_locks import (
    FIRST_OFFSET,
    STRIPES,
    AggregateHeldError,
    AggregateLocks,
)
from runledger.infrastructure.storage.sqlite import SQLiteStorage

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event as ProcessEvent

WAIT_SECONDS = 10


def hold_in_another_process(
    path: str, aggregate: str, held: ProcessEvent, release: ProcessEvent, first: bool = False
) -> None:
    """Hold ``aggregate`` (going ``first`` if asked) from ``held`` until ``release``."""
    locks = AggregateLocks(path)
    with locks.holding([UUID(aggregate)], first=first):
        held.set()
        release.wait(WAIT_SECONDS)
    locks.close()


TAKERS: list[threading.Thread] = []
"""The threads ``start_taking`` started, for ``join_takers``."""


def start_taking(hold: Callable[[], AbstractContextManager[None]]) -> threading.Event:
    """Enter ``hold()`` on a thread of its own; the event is set once it holds."""
    taken = threading.Event()

    def take() -> None:
        with hold():
            taken.set()

    thread = threading.Thread(target=take, daemon=True)
    TAKERS.append(thread)
    thread.start()
    return taken


def join_takers() -> None:
    """Wait for the takers to give their locks back: a taker still inside ``holding`` when
    the test closes the locks would use a closed lock file (the teardown race that failed a
    test in a loaded run, not the locks)."""
    while TAKERS:
        TAKERS.pop().join(WAIT_SECONDS)


def waited(hold: Callable[[], AbstractContextManager[None]], *, timeout: float = 0.3) -> bool:
    """Whether entering ``hold()`` on another thread waits for longer than ``timeout``."""
    return not start_taking(hold).wait(timeout)


def other_stripe(aggregate: UUID) -> UUID:
    while True:
        other = uuid4()
        if zlib.crc32(other.bytes) % STRIPES != zlib.crc32(aggregate.bytes) % STRIPES:
            return other


def test_an_aggregate_held_by_another_process_waits_until_it_is_given_back(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "store.db-locks")
    aggregate = uuid4()
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    holder: Any = context.Process(
        target=hold_in_another_process, args=(path, str(aggregate), held, release)
    )
    holder.start()
    locks = AggregateLocks(path)
    try:
        assert held.wait(WAIT_SECONDS)
        assert not waited(lambda: locks.holding([other_stripe(aggregate)]))
        taken = start_taking(lambda: locks.holding([aggregate]))
        assert not taken.wait(0.3), "taken while another process held it"
        release.set()
        assert taken.wait(WAIT_SECONDS)
    finally:
        release.set()
        holder.join(WAIT_SECONDS)
        join_takers()
        locks.close()


def test_threads_of_one_process_take_turns_on_an_aggregate(tmp_path: Path) -> None:
    locks = AggregateLocks(str(tmp_path / "store.db-locks"))
    aggregate = uuid4()
    try:
        with locks.holding([aggregate]):
            assert waited(lambda: locks.holding([aggregate]))
        assert not waited(lambda: locks.holding([aggregate]))
    finally:
        join_takers()
        locks.close()


def test_a_store_file_without_other_processes_keeps_its_threads_apart() -> None:
    locks = AggregateLocks(None)
    aggregate = uuid4()
    with locks.holding([aggregate]):
        assert waited(lambda: locks.holding([aggregate]))
        assert not waited(lambda: locks.holding([other_stripe(aggregate)]))
    join_takers()


def test_sqlite_storage_holds_aggregates_in_a_file_beside_the_database(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    first, second = SQLiteStorage(path), SQLiteStorage(path)
    aggregate = uuid4()
    try:
        with first.lock_aggregates([aggregate]):
            # Another storage on the file is another holder, as another process would be.
            taken = start_taking(lambda: second.lock_aggregates([aggregate]))
            assert not taken.wait(0.3)
        assert taken.wait(WAIT_SECONDS)
        assert (tmp_path / "store.db-locks").exists()
    finally:
        join_takers()
        first.close()
        second.close()


def free_in_another_process(path: str, aggregate: str, answers: Any, offset: int = 0) -> None:
    """Put whether another process could take ``aggregate``'s stripe (its byte at
    ``offset`` on) at once."""
    descriptor = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(
            descriptor,
            fcntl.LOCK_EX | fcntl.LOCK_NB,
            1,
            offset + zlib.crc32(UUID(aggregate).bytes) % STRIPES,
        )
    except OSError:
        answers.put(False)
    else:
        answers.put(True)
    finally:
        os.close(descriptor)


def test_closing_one_storage_keeps_the_locks_another_holds_on_the_file(tmp_path: Path) -> None:
    # POSIX drops every lock a process holds on a file when any descriptor of it closes.
    path = tmp_path / "store.db"
    first, second = SQLiteStorage(path), SQLiteStorage(path)
    aggregate = uuid4()
    context = multiprocessing.get_context("spawn")
    answers: Any = context.Queue()
    try:
        with first.lock_aggregates([uuid4()]), second.lock_aggregates([aggregate]):
            first.close()
            probe = context.Process(
                target=free_in_another_process,
                args=(f"{path}-locks", str(aggregate), answers),
            )
            probe.start()
            probe.join(WAIT_SECONDS)
            assert answers.get(timeout=WAIT_SECONDS) is False
    finally:
        second.close()


def test_sqlite_storage_holds_hot_aggregates_only_once_the_command_conflicted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    first, second = SQLiteStorage(path), SQLiteStorage(path)
    aggregate = uuid4()
    try:
        # Hot from other commands only: the reads of every process are not made to wait.
        with first.lock_aggregates([aggregate], conflicted=False):
            assert not waited(lambda: second.lock_aggregates([aggregate]))
    finally:
        join_takers()
        first.close()
        second.close()


def test_a_save_gives_way_to_another_process_going_first_and_only_to_it(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "store.db-locks")
    aggregate = uuid4()
    context = multiprocessing.get_context("spawn")
    locks = AggregateLocks(path)
    try:
        for refused in (False, True):
            held, release = context.Event(), context.Event()
            holder: Any = context.Process(
                target=hold_in_another_process, args=(path, str(aggregate), held, release, refused)
            )
            holder.start()
            try:
                assert held.wait(WAIT_SECONDS)
                if refused:
                    with pytest.raises(AggregateHeldError):
                        locks.give_way([other_stripe(aggregate), aggregate])
                    # A holder going first holds the aggregate as any holder does.
                    assert waited(lambda: locks.holding([aggregate]))
                else:
                    locks.give_way([aggregate])
                locks.give_way([other_stripe(aggregate)])
            finally:
                release.set()
                holder.join(WAIT_SECONDS)
                join_takers()
        locks.give_way([aggregate])
    finally:
        locks.close()


def test_giving_way_leaves_nothing_held(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    storage = SQLiteStorage(path)
    aggregate = uuid4()
    context = multiprocessing.get_context("spawn")
    answers: Any = context.Queue()
    try:
        assert storage._events.aggregate_locks is not None
        storage._events.aggregate_locks.give_way([aggregate])
        probe = context.Process(
            target=free_in_another_process,
            args=(f"{path}-locks", str(aggregate), answers, FIRST_OFFSET),
        )
        probe.start()
        probe.join(WAIT_SECONDS)
        assert answers.get(timeout=WAIT_SECONDS) is True
    finally:
        storage.close()


def test_threads_give_way_to_another_thread_going_first_but_not_to_their_own_hold(
    tmp_path: Path,
) -> None:
    locks = AggregateLocks(str(tmp_path / "store.db-locks"))
    aggregate = uuid4()
    try:
        with locks.holding([aggregate], first=True):
            # The holder's own save goes on.
            locks.give_way([aggregate])
            refused: list[bool] = []

            def save_elsewhere() -> None:
                try:
                    locks.give_way([aggregate])
                except AggregateHeldError:
                    refused.append(True)
                else:
                    refused.append(False)

            other = threading.Thread(target=save_elsewhere)
            other.start()
            other.join(WAIT_SECONDS)
            assert refused == [True]
        with locks.holding([aggregate]):
            other = threading.Thread(target=save_elsewhere)
            other.start()
            other.join(WAIT_SECONDS)
            assert refused == [True, False]
    finally:
        locks.close()


def hold_going_first_until_killed(path: str, aggregate: str, held: ProcessEvent) -> None:
    locks = AggregateLocks(path)
    with locks.holding([UUID(aggregate)], first=True):
        held.set()
        # Asleep, not waiting on a shared event: a process killed inside ``Event.wait`` leaves
        # the event's condition counting a sleeper, and the next ``set()`` waits for it.
        time.sleep(WAIT_SECONDS)


def test_a_holder_going_first_that_dies_lets_the_saves_through(tmp_path: Path) -> None:
    # The kernel gives a killed process's record locks back: no save waits on a dead holder.
    path = str(tmp_path / "store.db-locks")
    aggregate = uuid4()
    context = multiprocessing.get_context("spawn")
    held = context.Event()
    holder: Any = context.Process(
        target=hold_going_first_until_killed, args=(path, str(aggregate), held)
    )
    holder.start()
    locks = AggregateLocks(path)
    try:
        assert held.wait(WAIT_SECONDS)
        with pytest.raises(AggregateHeldError):
            locks.give_way([aggregate])
        holder.kill()
        holder.join(WAIT_SECONDS)
        locks.give_way([aggregate])
        assert not waited(lambda: locks.holding([aggregate], first=True))
    finally:
        holder.kill()
        holder.join(WAIT_SECONDS)
        join_takers()
        locks.close()
