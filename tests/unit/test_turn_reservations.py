"""Rules of the TurnReservation aggregate: one turn id belongs to exactly one message."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runledger.domain.turn_reservations import TurnReservation, turn_aggregate_id
from runledger.domain.values import Actor
from tests.support.specification import events_of, given

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SESSION_1 = Actor("session", "session-1")
MESSAGE_ID = "workflow-message-1de0d362a50efb25288e8a140cf87639d6e3ff7273b62c25a80642fcbb7c30e6"


def reserved() -> TurnReservation:
    return TurnReservation.reserve(
        "turn-1",
        workflow_message_id=MESSAGE_ID,
        run_id="run-1",
        target_session_id="session-1",
        actor=SESSION_1,
        now=NOW,
    )


def test_reserving_a_turn_id_records_the_message_that_owns_it() -> None:
    reservation = (
        given(TurnReservation, [])
        .when_creating(reserved)
        .then(
            [
                (
                    "workflow-turn.reserved",
                    {
                        "workflow_turn_id": "turn-1",
                        "workflow_message_id": MESSAGE_ID,
                        "run_id": "run-1",
                        "target_session_id": "session-1",
                        "actor": {"type": "session", "id": "session-1"},
                        "timestamp": NOW,
                        "originator_id": turn_aggregate_id("turn-1"),
                        "originator_version": 1,
                    },
                )
            ]
        )
    )
    assert (reservation.workflow_turn_id, reservation.workflow_message_id) == (
        "turn-1",
        MESSAGE_ID,
    )


def test_the_reservation_id_is_derived_from_the_turn_id_alone() -> None:
    assert turn_aggregate_id("turn-1") == reserved().id
    assert turn_aggregate_id("turn-1") != turn_aggregate_id("turn-2")


def test_a_reservation_matches_the_same_message_run_and_session() -> None:
    reservation = given(TurnReservation, events_of(reserved())).when(lambda _: None).then([])
    assert reservation.matches(
        workflow_message_id=MESSAGE_ID, run_id="run-1", target_session_id="session-1"
    )


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"workflow_message_id": "workflow-message-other"}, id="message"),
        pytest.param({"run_id": "run-2"}, id="run"),
        pytest.param({"target_session_id": "session-2"}, id="session"),
        pytest.param({"run_id": None}, id="run-missing"),
    ],
)
def test_a_reservation_does_not_match_another_message_run_or_session(
    changes: dict[str, Any],
) -> None:
    reservation = given(TurnReservation, events_of(reserved())).when(lambda _: None).then([])
    identity: dict[str, Any] = {
        "workflow_message_id": MESSAGE_ID,
        "run_id": "run-1",
        "target_session_id": "session-1",
        **changes,
    }
    assert reservation.matches(**identity) is False
