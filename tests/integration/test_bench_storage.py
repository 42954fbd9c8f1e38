"""P13, storage amplification: bytes on disk per byte of event payload, on SQLite (database
files after a WAL checkpoint) and PostgreSQL (every table of the store's schema)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger.domain.packed_state import ZSTD_V1, unpacked
from runledger.infrastructure.cli.bench.baselines import payload_bytes, plain_connection
from runledger.infrastructure.cli.bench.runner import Bench
from runledger.infrastructure.cli.bench.storage import (
    amplification,
    disk_bytes,
    logged_bytes,
    session_history,
)
from tests.support.bench import DURABLE, durable_bench


@pytest.fixture(params=DURABLE)
def bench(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Bench]:
    with durable_bench(request, tmp_path_factory, events=600) as opened:
        yield opened


def test_p13_reports_the_worse_history_as_disk_bytes_over_payload_bytes(bench: Bench) -> None:
    row = amplification(bench)

    assert row.id == "P13"
    assert row.unit == "bytes"
    assert row.baseline is not None
    assert row.ratio == pytest.approx(row.value / row.baseline)
    assert row.ratio is not None
    assert row.met == (row.ratio <= 2.0)
    assert "bench history of 600 events" in row.name
    assert "640 session records" in row.name


def test_the_payload_is_the_events_json_and_the_log_keeps_it_packed(bench: Bench) -> None:
    url = bench.scratch.new_url()
    disk, payload, logged = session_history(url, 128)

    with plain_connection(url) as connection:
        states = [
            bytes(state) for (state,) in connection.execute("SELECT state FROM runledger_events")
        ]
    assert payload == sum(len(unpacked(state)) for state in states) == payload_bytes(url)
    assert logged == sum(map(len, states)) == logged_bytes(url)
    # Each session record carries a 60-character output: the payload holds all 128, and the
    # log keeps the batches packed, in fewer bytes than their JSON.
    assert payload > 128 * 60
    assert any(state[0] == ZSTD_V1 for state in states)
    assert logged < payload
    assert disk > 0


def test_a_store_written_before_packing_counts_its_plain_json_as_payload(bench: Bench) -> None:
    url = bench.scratch.new_url()
    session_history(url, 64)
    with plain_connection(url) as connection:
        rows = connection.execute("SELECT position, state FROM runledger_events").fetchall()
        marker = "?" if url.startswith("sqlite") else "%s"
        for position, state in rows:
            connection.execute(
                f"UPDATE runledger_events SET state = {marker} WHERE position = {marker}",
                (unpacked(bytes(state)), position),
            )

    assert payload_bytes(url) == logged_bytes(url)


def test_sqlite_disk_bytes_are_the_database_file_after_the_wal_is_checkpointed(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    session_history(url, 64)

    size = disk_bytes(url)

    wal = tmp_path / "store.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    assert size == (tmp_path / "store.db").stat().st_size
