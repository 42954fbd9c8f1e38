"""The log keeps its payloads packed on every backend, and a log written before packing
(plain JSON) reads back as the same history: aggregates, read models and audit bundles."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from runledger.domain.errors import CorruptEventError
from runledger.domain.packed_state import ZSTD_V1, unpacked
from runledger.infrastructure import open_store
from runledger.infrastructure.cli.bench.baselines import plain_connection
from runledger.infrastructure.store import WorkflowStore
from tests.support.audit import play_demo
from tests.support.clock import FakeClock

ALL = 100_000


def states(store: WorkflowStore) -> list[bytes]:
    return [bytes(entry.state) for entry in store._runtime.storage.read_log(after=0, limit=ALL)]


def history(store: WorkflowStore, run_ids: list[str]) -> dict[str, object]:
    """What a host and an auditor see of the store: runs, read models, the runs' audits."""
    return {
        "runs": [store.get_run(run_id) for run_id in run_ids],
        "digests": {name: store.read_model_digest(name) for name in store.projection_names()},
        "audits": [store.audit_run(run_id, lineage=True) for run_id in run_ids],
        "verdicts": [store.verify_run(run_id).ok for run_id in run_ids],
    }


def test_every_backend_keeps_the_payloads_packed_and_reads_them_back(
    store_url: str, clock: FakeClock
) -> None:
    with open_store(store_url, clock=clock) as store:
        demo = play_demo(store)
        stored = states(store)
        payloads = [unpacked(state) for state in stored]

        assert len(stored) > 50
        assert all(isinstance(orjson.loads(payload), dict) for payload in payloads)
        # The demo's payloads are a few hundred bytes: packing shrinks nearly all of them.
        packed = [state for state in stored if state[0] == ZSTD_V1]
        assert len(packed) > 0.9 * len(stored)
        assert sum(map(len, stored)) < 0.6 * sum(map(len, payloads))
        assert store.verify_run(demo.logged_run).ok


def test_a_log_written_before_packing_reads_back_as_the_same_history(
    durable_url: str, clock: FakeClock
) -> None:
    with open_store(durable_url, clock=clock) as store:
        demo = play_demo(store)
        run_ids = [demo.logged_run, demo.restart_run]
        before = history(store, run_ids)
        rows = [
            (entry.position, entry.state)
            for entry in store._runtime.storage.read_log(after=0, limit=ALL)
        ]

    # Every payload as a store before packing held it: the JSON itself.
    marker = "?" if durable_url.startswith("sqlite") else "%s"
    with plain_connection(durable_url) as connection:
        for position, state in rows:
            connection.execute(
                f"UPDATE runledger_events SET state = {marker} WHERE position = {marker}",
                (unpacked(bytes(state)), position),
            )

    with open_store(durable_url, clock=clock) as store:
        assert not any(state[0] == ZSTD_V1 for state in states(store))
        store._runtime.rebuild_projections()
        assert history(store, run_ids) == before
        # New commands append packed payloads after the plain ones.
        store.create_run("after-packing", workflow_name="demo", input={})
        assert states(store)[-1][0] == ZSTD_V1
        assert store.get_run("after-packing") is not None


def damaged(durable_url: str, clock: FakeClock, damage: str) -> tuple[int, str]:
    """A demo store whose first ``follow-up.queued`` payload is damaged: its position and the
    run it belongs to."""
    with open_store(durable_url, clock=clock) as store:
        play_demo(store)
        entry = next(
            entry
            for entry in store._runtime.storage.read_log(after=0, limit=ALL)
            if entry.topic == "follow-up.queued"
        )
    state = bytes(entry.state)
    assert state[0] == ZSTD_V1
    run_id = orjson.loads(unpacked(state))["run_id"]
    broken = state[: len(state) // 2] if damage == "truncated" else b"\x02" + state[1:]
    marker = "?" if durable_url.startswith("sqlite") else "%s"
    with plain_connection(durable_url) as connection:
        connection.execute(
            f"UPDATE runledger_events SET state = {marker} WHERE position = {marker}",
            (broken, entry.position),
        )
    return entry.position, run_id


@pytest.mark.parametrize("damage", ["truncated", "foreign marker"])
def test_a_damaged_packed_payload_stops_the_rebuild_naming_its_position(
    durable_url: str, clock: FakeClock, damage: str
) -> None:
    position, _ = damaged(durable_url, clock, damage)

    with open_store(durable_url, clock=clock) as store, pytest.raises(CorruptEventError) as raised:
        store._runtime.rebuild_projections()
    assert raised.value.position == position


@pytest.mark.parametrize("damage", ["truncated", "foreign marker"])
def test_a_damaged_packed_payload_stops_an_export_naming_its_position(
    durable_url: str, clock: FakeClock, damage: str, tmp_path: Path
) -> None:
    position, run_id = damaged(durable_url, clock, damage)
    bundle = tmp_path / "run.jsonl"

    with open_store(durable_url, clock=clock) as store, pytest.raises(CorruptEventError) as raised:
        store.export_run(run_id, bundle, lineage=False)
    assert raised.value.position == position
    assert raised.value.wire_name == "follow-up.queued"
    assert not bundle.exists()
