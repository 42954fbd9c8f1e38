"""P13, storage amplification: the bytes a store takes on disk per byte of event payload.

The disk side is every file of the database (SQLite: the database file and its WAL, after a
``wal_checkpoint(TRUNCATE)`` moved every page home) or every table of the store's schema with
its indexes and TOAST (PostgreSQL: ``pg_total_relation_size``); the payload side is the
events' JSON payloads, the bytes the history holds, whether the log keeps one packed
(``domain.packed_state``) or as it is. Both histories have every read model current:

- the bench history (``HistoryGenerator``, runs of follow-ups, settings and attempts);
- a session-recording-heavy one: one run whose session records arrive through
  ``append_session_events`` in batches of 64, as a recording host sends them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from runledger.infrastructure.cli.bench.baselines import payload_bytes, plain_connection
from runledger.infrastructure.cli.bench.runner import (
    SESSION_BATCH,
    Bench,
    BenchResult,
    session_records,
)
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import open_store

GOAL: Final = 2.0
"""Bytes on disk per byte of event payload, for either history."""

SESSION_RECORDS: Final = {"quick": 640, "default": 12_800, "full": 64_000}
"""Session records of the recording-heavy history, by the bench's size."""


def disk_bytes(url: str) -> int:
    """The bytes the database at ``url`` takes on disk (see the module docstring)."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        with plain_connection(url) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        wal = path.with_name(path.name + "-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    with plain_connection(url) as connection:
        row = connection.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')"
        ).fetchone()
    return int(row[0])


def logged_bytes(url: str) -> int:
    """The bytes the log keeps of the events' payloads (packed or as they are)."""
    with plain_connection(url) as connection:
        row = connection.execute(
            "SELECT coalesce(sum(length(state)), 0) FROM runledger_events"
        ).fetchone()
    return int(row[0])


def measured(url: str) -> tuple[int, int, int]:
    """Disk, payload and logged bytes of the store at ``url``."""
    return disk_bytes(url), payload_bytes(url), logged_bytes(url)


def bench_history(url: str, events: int) -> tuple[int, int, int]:
    """``measured`` for the bench history of about ``events`` events."""
    with open_runtime(url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(prefix="p13").batches(events):
            runtime.storage.events.insert_events(batch)
        runtime.rebuild_projections()
    return measured(url)


def session_history(url: str, records: int) -> tuple[int, int, int]:
    """``measured`` for one run recording ``records`` session records."""
    with open_store(url) as store:
        store.create_run("p13", workflow_name="bench", input={})
        store.record_session_binding(
            "p13",
            {
                "schema": "pi-workflows.session-binding.v1",
                "runId": "p13",
                "piSessionId": "p13-session",
                "boundAt": "2026-01-01T00:00:00.000Z",
            },
        )
        for first in range(1, records + 1, SESSION_BATCH):
            store.append_session_events("p13", session_records(first))
    return measured(url)


def amplification(bench: Bench) -> BenchResult:
    """P13: the worse of the two histories' bytes on disk per byte of event payload."""
    size = "quick" if bench.quick else "full" if bench.full else "default"
    records = SESSION_RECORDS[size]
    histories = {
        f"bench history of {bench.events:,} events": bench_history(
            bench.scratch.new_url(), bench.events
        ),
        f"{records:,} session records": session_history(bench.scratch.new_url(), records),
    }
    ratios = {name: disk / payload for name, (disk, payload, _) in histories.items()}
    worst = max(ratios, key=lambda name: ratios[name])
    disk, payload, _ = histories[worst]
    detail = "; ".join(
        f"{name}: {histories[name][0] / 1e6:,.1f} MB on disk for "
        f"{histories[name][1] / 1e6:,.1f} MB of payload (the log keeps "
        f"{histories[name][2] / 1e6:,.1f} MB of it), {ratio:.2f} x"
        for name, ratio in ratios.items()
    )
    return BenchResult(
        "P13",
        f"storage amplification, bytes on disk per byte of event payload ({detail})",
        disk,
        "bytes",
        payload,
        disk / payload,
        f"<= {GOAL} x the events' payload bytes, for each history",
        disk / payload <= GOAL,
        {"payload": payload},
    )
