"""Session ids and mount paths key the read models' indexes: up to ``MAX_KEY_TEXT_BYTES`` of
UTF-8 they are stored and found on every backend, with every read model current; longer ones
are refused at the door and write nothing.

On PostgreSQL a longer session id used to commit its events and then stall every read model
for good: the view's btree refused the row (at most 2,704 bytes an entry).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from runledger.domain.errors import KeyTooLongError
from runledger.domain.records import QueuedFollowUp
from runledger.domain.values import MAX_KEY_TEXT_BYTES
from runledger.infrastructure.store import WorkflowStore
from tests.integration.test_scenarios_settings import scope
from tests.support.assertions import assert_rejected
from tests.support.scenario import RUN, SESSION_ACTOR, create, running_run


def incompressible(size: int) -> str:
    """``size`` bytes of ASCII that no compression shrinks (an index entry stays as long)."""
    text = ""
    block = b"seed"
    while len(text) < size:
        block = hashlib.sha256(block).digest()
        text += block.hex()
    return text[:size]


def all_current(store: WorkflowStore) -> None:
    statuses = store.projection_status()
    assert [(s.name, s.lag, s.last_error) for s in statuses] == [
        (s.name, 0, None) for s in statuses
    ]


def test_a_session_id_of_the_longest_length_is_stored_and_found(store: WorkflowStore) -> None:
    session = incompressible(MAX_KEY_TEXT_BYTES)
    running_run(store, session_id=session)

    queued = queue_for(store, session)

    all_current(store)
    queue = store.follow_up_queue(RUN)
    assert queue is not None
    assert queue.origin_session_id == session
    assert [f.follow_up_id for f in queue.follow_ups] == [queued.follow_up.follow_up_id]
    assert [m.target_session_id for m in store.session_outbox(session)] == [session]
    assert [r.run_id for r in store.list_runs(session_id=session).runs] == [RUN]


def bind(store: WorkflowStore, session: str) -> object:
    return store.bind_origin_session(RUN, session)


def queue_for(store: WorkflowStore, session: str) -> QueuedFollowUp:
    return store.queue_follow_up(
        RUN,
        request_id="request-1",
        target_session_id=session,
        actor=SESSION_ACTOR,
        source="workflow-tool",
        prompt="p",
    )


@pytest.mark.parametrize(
    ("argument", "command"), [("session_id", bind), ("target_session_id", queue_for)]
)
def test_a_session_id_one_byte_longer_is_refused_and_writes_nothing(
    store: WorkflowStore, argument: str, command: Callable[[WorkflowStore, str], object]
) -> None:
    if command is bind:
        create(store)
    else:
        running_run(store)

    assert_rejected(
        store,
        KeyTooLongError,
        f"Workflow argument {argument} is longer than 1024 bytes of UTF-8",
        command,
        store,
        incompressible(MAX_KEY_TEXT_BYTES + 1),
    )
    all_current(store)


def test_a_mount_path_of_the_longest_length_keys_a_scope_and_one_longer_is_refused(
    store: WorkflowStore,
) -> None:
    running_run(store)
    mount = incompressible(MAX_KEY_TEXT_BYTES)

    created = scope(store, mount_path=mount)

    all_current(store)
    assert [s.scope_id for s in store.settings_scopes(RUN)] == [created.scope_id]
    assert created.mount_path == mount
    assert_rejected(
        store,
        KeyTooLongError,
        "Workflow argument mount_path is longer than 1024 bytes of UTF-8",
        scope,
        store,
        mount_path=incompressible(MAX_KEY_TEXT_BYTES + 1),
    )
