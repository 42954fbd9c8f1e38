"""The LISTEN connection's wait: a NOTIFY from another session ends it, one that arrived
during a query on the connection is not lost, and ``interrupt`` ends it without waiting for
the slice (a closing store or a stopping worker is not held up)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from runledger.infrastructure.views import listener as listener_module
from runledger.infrastructure.views.listener import Listener

pytestmark = pytest.mark.postgres
CHANNEL = "runledger_test_listener"


@pytest.fixture
def listener(postgres_store_url: str) -> Iterator[Listener]:
    opened = Listener(postgres_store_url, CHANNEL)
    assert opened.connection() is not None
    yield opened
    opened.release()


def notify(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"NOTIFY {CHANNEL}")


def test_a_notify_from_another_session_ends_the_wait(
    listener: Listener, postgres_store_url: str
) -> None:
    notify(postgres_store_url)
    assert listener.wait(30.0, threading.Event()) is True


def test_a_notify_read_by_a_query_on_the_connection_still_ends_the_wait(
    listener: Listener, postgres_store_url: str
) -> None:
    connection = listener.connection()
    assert connection is not None
    notify(postgres_store_url)
    # The query reads the NOTIFY off the socket before the wait starts.
    connection.execute("SELECT pg_sleep(0.2)")
    assert listener.wait(30.0, threading.Event()) is True


def test_notifies_of_ignored_sessions_do_not_end_the_wait(
    listener: Listener, postgres_store_url: str
) -> None:
    notify(postgres_store_url)
    assert listener.wait(0.5, threading.Event(), ignored=lambda _: True) is False


def test_an_interrupt_ends_a_wait_at_once_when_stopping(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slice as long as the test's timeout: only the interrupt can end this wait.
    monkeypatch.setattr(listener_module, "SLICE_SECONDS", 3600.0)
    stopping = threading.Event()
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(listener.wait(3600.0, stopping)))
    waiter.start()
    stopping.set()
    listener.interrupt()
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    assert outcome == [False]


def test_an_interrupt_without_stopping_lets_the_wait_go_on(
    listener: Listener, postgres_store_url: str
) -> None:
    listener.interrupt()
    stopping = threading.Event()
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(listener.wait(3600.0, stopping)))
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive(), "an interrupt alone does not end the wait"
    notify(postgres_store_url)
    waiter.join(timeout=60)
    assert outcome == [True]


def test_a_wait_that_opens_the_listening_session_asks_the_caller_to_look(
    postgres_store_url: str,
) -> None:
    # A commit made before the LISTEN woke nobody: the new session must send its caller to
    # the log at once, not let it sleep until the timeout on a notification that never comes.
    fresh = Listener(postgres_store_url, CHANNEL)
    try:
        assert fresh.wait(10.0, threading.Event()) is True
        assert fresh.connections == 1
        # The session stays: the next wait sleeps on it (a short timeout, nothing notified).
        assert fresh.wait(0.3, threading.Event()) is False
        fresh.close()
        assert fresh.wait(10.0, threading.Event()) is True, "a reconnect heard nothing either"
        assert fresh.connections == 2
    finally:
        fresh.release()


def test_a_session_that_does_not_listen_yet_is_no_reason_to_look(postgres_store_url: str) -> None:
    # The election's listener opens its session before it leads and listens: that session
    # hears nothing by design, and its wait times out as any other.
    quiet = Listener(postgres_store_url, CHANNEL, listening=False)
    try:
        assert quiet.wait(0.3, threading.Event()) is False
        assert quiet.connections == 1
    finally:
        quiet.release()
