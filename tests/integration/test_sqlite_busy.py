"""A SQLite file whose write lock another connection holds past the busy timeout: a command
is refused as the store being unavailable now (``store.unavailable``, retryable), never with
the driver's bare error, and writes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runledger.domain.errors import StorageUnavailableError
from runledger.infrastructure import open_store


def test_a_command_waiting_past_the_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        store.create_run("run-1", workflow_name="review", input={})
        log = store.event_log()
        holder = sqlite3.connect(path, timeout=0.1)
        try:
            holder.execute("BEGIN IMMEDIATE")

            with pytest.raises(StorageUnavailableError) as refused:
                store.record_progress("run-1", status="running", current_node="build")
        finally:
            holder.rollback()
            holder.close()
        assert refused.value.retryable
        assert refused.value.code == "store.unavailable"
        assert str(path) in str(refused.value)
        assert store.event_log() == log
        store.record_progress("run-1", status="running", current_node="build")
        assert len(store.event_log()) == len(log) + 1
