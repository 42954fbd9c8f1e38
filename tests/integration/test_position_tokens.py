"""``position_token()`` / ``reading_after(token)`` on every backend: a token round-trips, a
store adopts another's, a malformed one is refused and changes nothing. On memory and SQLite
every read sees every commit, so a token asks nothing more of them; on PostgreSQL it carries
the WAL and log positions of the store's commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from runledger.domain.errors import InvalidPositionTokenError
from runledger.infrastructure.storage.replicas import ReadPosition
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.scenario import RUN, running_run


def test_a_stores_own_token_is_taken_back(store: WorkflowStore) -> None:
    running_run(store, session_id="session-1")
    token = store.position_token()

    store.reading_after(token)

    assert store.position_token() == token


def test_a_token_from_another_store_is_adopted_and_its_write_is_read(durable_url: str) -> None:
    with open_store(durable_url) as writer, open_store(durable_url) as reader:
        running_run(writer, session_id="session-1")

        reader.reading_after(writer.position_token())

        run = reader.get_run(RUN)
        assert run is not None
        assert run.status == "running"
        assert [listed.run_id for listed in reader.list_runs().runs] == [RUN]


def test_an_adopted_token_is_carried_on_by_the_adopting_store(store_url: str) -> None:
    with open_store(store_url) as writer, open_store(store_url) as reader:
        running_run(writer, session_id="session-1")
        token = writer.position_token()

        reader.reading_after(token)

        assert ReadPosition.from_token(reader.position_token()) == ReadPosition.from_token(token)


@pytest.mark.parametrize("token", ["", "not-a-token", "rl1.zz.0", 12])
def test_a_malformed_token_is_refused_and_changes_nothing(
    store: WorkflowStore, token: object
) -> None:
    before = store.position_token()

    with pytest.raises(InvalidPositionTokenError) as raised:
        store.reading_after(token)  # type: ignore[arg-type]

    assert raised.value.code == "store.invalid-position-token"
    assert store.position_token() == before


@pytest.mark.postgres
def test_a_command_on_postgresql_moves_the_token_past_its_commit(postgres_store_url: str) -> None:
    with open_store(postgres_store_url) as store:
        before = ReadPosition.from_token(store.position_token())
        running_run(store, session_id="session-1")
        after = ReadPosition.from_token(store.position_token())

        assert after.lsn > before.lsn
        assert after.position == store.event_log(limit=1000)[-1].position


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_on_memory_and_sqlite_a_token_carries_no_position(backend: str, tmp_path: Path) -> None:
    url = "memory://" if backend == "memory" else f"sqlite:///{tmp_path / 'runledger.db'}"
    with open_store(url) as store:
        running_run(store, session_id="session-1")

        assert ReadPosition.from_token(store.position_token()) == ReadPosition()
