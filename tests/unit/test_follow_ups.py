"""Rules of the FollowUp aggregate and its request checks (upstream §4.2, §4.3, §11 A/B)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runledger.domain.errors import (
    CancelledFollowUpRemovalError,
    EmptyPromptError,
    FollowUpNotInRunError,
    FollowUpRemovalNotAllowedError,
    FollowUpRequestReusedError,
    InvalidActorError,
    InvalidRequestIdError,
    InvalidSourceError,
    PromptTooLargeError,
    UnknownActorTypeError,
)
from runledger.domain.follow_ups import (
    FollowUp,
    check_prompt,
    check_request_id,
    check_source,
    follow_up_aggregate_id,
)
from runledger.domain.values import SYSTEM, Actor, BadEndStatus
from tests.support.specification import Event, events_of, given

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(minutes=1)
FOLLOW_UP_ID = "follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27"
MESSAGE_ID = "workflow-message-1de0d362a50efb25288e8a140cf87639d6e3ff7273b62c25a80642fcbb7c30e6"
SESSION_1 = Actor("session", "session-1")
WORKFLOW_TOOL = "workflow-tool"
REQUEST_ID_MESSAGE = "Workflow request ID must be a stable identifier of at most 512 characters"
SOURCE_MESSAGE = "Workflow change source must be a non-empty string of at most 128 characters"
EMPTY_PROMPT_MESSAGE = "Workflow follow-up prompt must be a non-empty string"
LARGE_PROMPT_MESSAGE = "Workflow follow-up prompt cannot exceed 65536 bytes"
REMOVAL_MESSAGE = "Workflow follow-up can be removed only by its source or a verified human"

FollowUpCommand = Callable[[FollowUp], object]


def queued(
    *,
    actor: Actor = SESSION_1,
    source: str = WORKFLOW_TOOL,
    prompt: str = "First task",
    order: int = 1,
) -> FollowUp:
    return FollowUp.queue(
        FOLLOW_UP_ID,
        run_id="run-1",
        request_id="follow-1",
        order=order,
        target_session_id="session-1",
        actor=actor,
        source=source,
        prompt=prompt,
        workflow_message_id=MESSAGE_ID,
        now=NOW,
    )


def history(*commands: FollowUpCommand, **queue: Any) -> list[Event]:
    return events_of(queued(**queue), *commands)


def removed_by(actor: Actor, source: str) -> FollowUpCommand:
    return lambda follow_up: follow_up.remove(actor=actor, source=source, now=LATER)


def cancelled(reason: str = "boom", status: BadEndStatus = "failed") -> FollowUpCommand:
    return lambda follow_up: follow_up.cancel(
        ended_run_id="run-1", status=status, reason=reason, actor=SYSTEM, now=LATER
    )


def removable_by(actor: Actor, source: str) -> FollowUpCommand:
    return lambda follow_up: follow_up.check_removable_by(actor, source)


# -- request id (§4.2 step 1, A8) ------------------------------------------------------------


@pytest.mark.parametrize("request_id", ["a:b.c_d-1", "follow-1", "0", "x" * 512, "A:"])
def test_a_stable_request_id_is_valid(request_id: str) -> None:
    assert check_request_id(request_id) == request_id


@pytest.mark.parametrize(
    "request_id",
    [
        pytest.param("-x", id="dash-first"),
        pytest.param("", id="empty"),
        pytest.param("x" * 513, id="513-chars"),
        pytest.param(":x", id="colon-first"),
        pytest.param(".x", id="dot-first"),
        pytest.param("a b", id="space"),
        pytest.param("a/b", id="slash"),
        pytest.param("é", id="non-ascii"),
        pytest.param("follow-1\n", id="trailing-newline"),
        pytest.param(None, id="none"),
        pytest.param(12, id="int"),
    ],
)
def test_an_unstable_request_id_is_rejected(request_id: object) -> None:
    with pytest.raises(InvalidRequestIdError) as raised:
        check_request_id(request_id)
    assert str(raised.value) == REQUEST_ID_MESSAGE


# -- source (§4.2 step 2, A8) ----------------------------------------------------------------


@pytest.mark.parametrize("source", ["workflow-tool", "x", "y" * 128, " padded "])
def test_a_short_non_blank_source_is_valid(source: str) -> None:
    assert check_source(source) == source


def test_a_source_length_counts_code_points_not_utf16_units() -> None:
    # DESIGN decision 11: 128 astral characters are 128 code points (256 UTF-16 units).
    assert check_source("\U0001f600" * 128) == "\U0001f600" * 128


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("", id="empty"),
        pytest.param("   ", id="spaces"),
        pytest.param("\t\n", id="tab-newline"),
        pytest.param("y" * 129, id="129-chars"),
        pytest.param(None, id="none"),
        pytest.param(3, id="int"),
    ],
)
def test_a_blank_or_long_source_is_rejected(source: object) -> None:
    with pytest.raises(InvalidSourceError) as raised:
        check_source(source)
    assert str(raised.value) == SOURCE_MESSAGE


# -- prompt (§4.2 steps 3-4, A6, A7) -------------------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    ["First task", "x" * 65536, "€" * 21845, "  padded  "],
    ids=["short", "65536-ascii-bytes", "21845-euros-65535-bytes", "padded"],
)
def test_a_non_blank_prompt_of_at_most_65536_bytes_is_valid(prompt: str) -> None:
    assert check_prompt(prompt) == prompt


@pytest.mark.parametrize(
    "prompt", ["", " ", "\n\t  ", None, 123], ids=["empty", "space", "whitespace", "none", "int"]
)
def test_a_blank_or_non_text_prompt_is_rejected_as_empty(prompt: object) -> None:
    with pytest.raises(EmptyPromptError) as raised:
        check_prompt(prompt)
    assert str(raised.value) == EMPTY_PROMPT_MESSAGE


@pytest.mark.parametrize(
    "prompt", ["x" * 65537, "€" * 21846], ids=["65537-ascii-bytes", "21846-euros-65538-bytes"]
)
def test_a_prompt_over_65536_utf8_bytes_is_rejected(prompt: str) -> None:
    with pytest.raises(PromptTooLargeError) as raised:
        check_prompt(prompt)
    assert str(raised.value) == LARGE_PROMPT_MESSAGE


def test_a_blank_prompt_over_the_byte_limit_is_reported_as_empty() -> None:
    with pytest.raises(EmptyPromptError) as raised:
        check_prompt(" " * 70000)
    assert str(raised.value) == EMPTY_PROMPT_MESSAGE


# -- actors (§1.3) ---------------------------------------------------------------------------


def test_an_actor_of_an_unknown_type_is_rejected_listing_the_valid_types() -> None:
    with pytest.raises(UnknownActorTypeError) as raised:
        Actor("robot", "r2")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "Unknown saved actor type: robot (actor types: session, host, controller, channel, "
        "human, policy, control, system)"
    )


@pytest.mark.parametrize(("actor_type", "actor_id"), [(5, None), ("session", 5)])
def test_an_actor_with_a_non_text_type_or_id_is_rejected(actor_type: Any, actor_id: Any) -> None:
    with pytest.raises(InvalidActorError) as raised:
        Actor(actor_type, actor_id)
    assert str(raised.value) == (
        "Workflow actor must be an Actor with a known type and an optional text id"
    )


def test_an_actor_is_accepted_as_an_actor_or_as_its_json_form() -> None:
    assert Actor.coerce(SESSION_1) is SESSION_1
    assert Actor.coerce({"type": "human"}) == Actor("human", None)
    assert Actor.coerce({"type": "session", "id": "s1"}).to_json() == {
        "type": "session",
        "id": "s1",
    }


@pytest.mark.parametrize("value", ["session", None, {"id": "s1"}])
def test_anything_else_is_not_an_actor(value: object) -> None:
    with pytest.raises(InvalidActorError):
        Actor.coerce(value)


# -- queueing ------------------------------------------------------------------------------


def test_queueing_records_the_whole_request_and_the_message_it_will_be_sent_as() -> None:
    follow_up = (
        given(FollowUp, [])
        .when_creating(queued)
        .then(
            [
                (
                    "follow-up.queued",
                    {
                        "follow_up_id": FOLLOW_UP_ID,
                        "run_id": "run-1",
                        "request_id": "follow-1",
                        "order": 1,
                        "target_session_id": "session-1",
                        "source": WORKFLOW_TOOL,
                        "prompt": "First task",
                        "workflow_message_id": MESSAGE_ID,
                        "actor": {"type": "session", "id": "session-1"},
                        "timestamp": NOW,
                        "originator_id": follow_up_aggregate_id(FOLLOW_UP_ID),
                        "originator_version": 1,
                    },
                )
            ]
        )
    )
    assert (follow_up.state, follow_up.reason) == ("queued", None)


def test_the_follow_up_record_shows_who_queued_it() -> None:
    follow_up = given(FollowUp, history(actor=Actor("human"))).when(lambda _: None).then([])
    assert follow_up.to_record().model_dump() == {
        "follow_up_id": FOLLOW_UP_ID,
        "run_id": "run-1",
        "request_id": "follow-1",
        "order": 1,
        "target_session_id": "session-1",
        "actor": {"type": "human", "id": None},
        "source": WORKFLOW_TOOL,
        "prompt": "First task",
        "state": "queued",
        "reason": None,
        "created_at": NOW,
        "updated_at": NOW,
        "delivery": None,
    }


# -- adoption of a repeated request (§4.2 step 5, A2) ---------------------------------------


def same_request(**changes: Any) -> FollowUpCommand:
    request: dict[str, Any] = {
        "target_session_id": "session-1",
        "actor": SESSION_1,
        "source": WORKFLOW_TOOL,
        "prompt": "First task",
        **changes,
    }
    return lambda follow_up: follow_up.check_same_request(**request)


def test_a_repeated_request_with_identical_content_is_the_same_request() -> None:
    given(FollowUp, history()).when(same_request()).then([])


def test_a_repeated_request_with_an_absent_actor_id_matches_an_absent_one() -> None:
    given(FollowUp, history(actor=Actor("human"))).when(same_request(actor=Actor("human"))).then([])


def test_a_repeated_request_is_the_same_request_whatever_state_the_follow_up_is_in() -> None:
    given(FollowUp, history(cancelled())).when(same_request()).then([])


@pytest.mark.parametrize(
    "changes",
    [
        {"prompt": "Different task"},
        {"target_session_id": "session-2"},
        {"actor": Actor("controller", "session-1")},
        {"actor": Actor("session", "session-2")},
        {"actor": Actor("session")},
        {"source": "interactive-command"},
    ],
    ids=["prompt", "target", "actor-type", "actor-id", "actor-id-absent", "source"],
)
def test_a_request_id_reused_with_different_content_is_rejected(changes: dict[str, Any]) -> None:
    given(FollowUp, history()).when(same_request(**changes)).then_raises(
        FollowUpRequestReusedError,
        "Workflow follow-up request ID was reused with different content",
    )


# -- belonging to a run (§4.3 step 3, B5) ----------------------------------------------------


def test_a_follow_up_is_part_of_its_own_run() -> None:
    given(FollowUp, history()).when(lambda follow_up: follow_up.check_part_of("run-1")).then([])


def test_a_follow_up_is_not_part_of_another_run() -> None:
    given(FollowUp, history()).when(lambda follow_up: follow_up.check_part_of("other")).then_raises(
        FollowUpNotInRunError, "Workflow follow-up is not part of run other"
    )


# -- removal authority (§4.3 steps 5-6, B4) --------------------------------------------------

REMOVAL_TABLE = [
    # queued by, queued with source, removed by, removed with source, allowed
    (SESSION_1, WORKFLOW_TOOL, SESSION_1, WORKFLOW_TOOL, True),
    (SESSION_1, WORKFLOW_TOOL, SESSION_1, "interactive-command", False),
    (SESSION_1, WORKFLOW_TOOL, Actor("session", "session-2"), WORKFLOW_TOOL, False),
    (SESSION_1, WORKFLOW_TOOL, Actor("session"), WORKFLOW_TOOL, False),
    (SESSION_1, WORKFLOW_TOOL, Actor("human"), "interactive-command", True),
    (SESSION_1, WORKFLOW_TOOL, Actor("human", "user-1"), "anything", True),
    (SESSION_1, WORKFLOW_TOOL, Actor("host", "h"), WORKFLOW_TOOL, False),
    (SESSION_1, WORKFLOW_TOOL, Actor("system"), WORKFLOW_TOOL, False),
    (SESSION_1, WORKFLOW_TOOL, Actor("channel", "session-1"), WORKFLOW_TOOL, False),
    (SESSION_1, WORKFLOW_TOOL, Actor("policy"), WORKFLOW_TOOL, False),
    (SESSION_1, WORKFLOW_TOOL, Actor("control"), WORKFLOW_TOOL, False),
    (SESSION_1, WORKFLOW_TOOL, Actor("controller", "session-1"), WORKFLOW_TOOL, False),
    (
        Actor("controller", "c1"),
        "controller-request",
        Actor("controller", "c1"),
        "controller-request",
        True,
    ),
    (
        Actor("controller", "c1"),
        "controller-request",
        Actor("controller", "c2"),
        "controller-request",
        False,
    ),
    (Actor("session"), WORKFLOW_TOOL, Actor("session"), WORKFLOW_TOOL, True),
    (Actor("host", "h"), "host", Actor("host", "h"), "host", False),
    (Actor("human", "user-1"), "interactive-command", Actor("human", "user-2"), "other", True),
]


def _removal_id(case: tuple[Actor, str, Actor, str, bool]) -> str:
    owner, owner_source, remover, source, allowed = case
    verdict = "allowed" if allowed else "denied"
    return (
        f"{owner.type}:{owner.id}/{owner_source}-by-{remover.type}:{remover.id}/{source}-{verdict}"
    )


@pytest.mark.parametrize(
    ("owner", "owner_source", "remover", "source", "allowed"),
    REMOVAL_TABLE,
    ids=[_removal_id(case) for case in REMOVAL_TABLE],
)
def test_removal_is_allowed_only_to_the_source_or_a_human(
    owner: Actor, owner_source: str, remover: Actor, source: str, allowed: bool
) -> None:
    outcome = given(FollowUp, history(actor=owner, source=owner_source)).when(
        removable_by(remover, source)
    )
    if allowed:
        outcome.then([])
    else:
        outcome.then_raises(FollowUpRemovalNotAllowedError, REMOVAL_MESSAGE)


def test_a_cancelled_follow_up_cannot_be_removed_even_by_a_human() -> None:
    given(FollowUp, history(cancelled())).when(
        removable_by(Actor("human", "user-1"), "interactive-command")
    ).then_raises(CancelledFollowUpRemovalError, "A cancelled workflow follow-up cannot be removed")


def test_the_cancelled_rule_is_checked_before_the_authority_rule() -> None:
    given(FollowUp, history(cancelled())).when(
        removable_by(Actor("host", "h"), WORKFLOW_TOOL)
    ).then_raises(CancelledFollowUpRemovalError, "A cancelled workflow follow-up cannot be removed")


# -- removing and cancelling (§4.3 step 8, §4.6) ---------------------------------------------


def test_removing_records_the_remover_and_the_fixed_reason() -> None:
    follow_up = (
        given(FollowUp, history())
        .when(removed_by(Actor("human", "user-1"), "interactive-command"))
        .then(
            [
                (
                    "follow-up.removed",
                    {
                        "follow_up_id": FOLLOW_UP_ID,
                        "run_id": "run-1",
                        "source": "interactive-command",
                        "reason": "Removed before delivery",
                        "actor": {"type": "human", "id": "user-1"},
                        "timestamp": LATER,
                        "originator_version": 2,
                    },
                )
            ]
        )
    )
    assert (follow_up.state, follow_up.reason) == ("removed", "Removed before delivery")
    assert follow_up.to_record().updated_at == LATER


def test_cancelling_records_the_run_that_ended_its_status_and_the_reason() -> None:
    follow_up = (
        given(FollowUp, history())
        .when(
            lambda follow_up: follow_up.cancel(
                ended_run_id="child-run",
                status="timed_out",
                reason="Workflow ended with status timed_out",
                actor=SYSTEM,
                now=LATER,
            )
        )
        .then(
            [
                (
                    "follow-up.cancelled",
                    {
                        "follow_up_id": FOLLOW_UP_ID,
                        "run_id": "run-1",
                        "ended_run_id": "child-run",
                        "status": "timed_out",
                        "reason": "Workflow ended with status timed_out",
                        "actor": {"type": "system", "id": None},
                    },
                )
            ]
        )
    )
    assert (follow_up.state, follow_up.reason) == (
        "cancelled",
        "Workflow ended with status timed_out",
    )
