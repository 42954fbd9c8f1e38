"""Records return the Actor that commands take (DESIGN "Public API"), on every backend."""

from __future__ import annotations

from runledger.domain import Actor
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import RUN, SESSION, SESSION_ACTOR, queue, running_run

HUMAN = Actor("human", "user-1")


def test_a_follow_up_record_carries_the_actor_that_queued_it(store: WorkflowStore) -> None:
    running_run(store)
    queued = queue(store).follow_up
    found = store.get_follow_up(queued.follow_up_id)
    assert found is not None
    assert queued.actor == found.actor == Actor("session", SESSION)


def test_the_follow_up_queue_read_model_returns_the_same_actor(store: WorkflowStore) -> None:
    running_run(store)
    queue(store, actor={"type": "session", "id": SESSION})  # type: ignore[arg-type]
    read = store.follow_up_queue(RUN)
    assert read is not None
    assert [follow_up.actor for follow_up in read.follow_ups] == [SESSION_ACTOR]


def test_logged_events_carry_who_acted_and_the_system_for_the_cascade(
    store: WorkflowStore,
) -> None:
    running_run(store)
    removed = queue(store, "follow-1").follow_up.follow_up_id
    queue(store, "follow-2")
    store.remove_follow_up(RUN, removed, actor=HUMAN, source="interactive-command")
    store.finish_run(RUN, status="failed", error="boom")
    follow_up_events = [
        (event.wire_name, event.actor)
        for event in store.event_log(run_id=RUN)
        if event.wire_name.startswith("follow-up.")
    ]
    assert follow_up_events == [
        ("follow-up.queued", SESSION_ACTOR),
        ("follow-up.queued", SESSION_ACTOR),
        ("follow-up.removed", HUMAN),
        ("follow-up.cancelled", Actor("system")),
    ]
