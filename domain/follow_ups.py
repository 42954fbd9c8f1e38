"""The FollowUp aggregate: a prompt queued against a run for its origin Pi session."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.errors import (
    CancelledFollowUpRemovalError,
    EmptyPromptError,
    FollowUpNotInRunError,
    FollowUpRemovalNotAllowedError,
    FollowUpRequestReusedError,
    InvalidRequestIdError,
    InvalidSourceError,
    PromptTooLargeError,
)
from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id
from runledger.domain.records import FollowUpRecord
from runledger.domain.values import REMOVED_REASON, Actor, BadEndStatus, FollowUpState

MAX_REQUEST_ID_LENGTH: Final = 512
REQUEST_ID_PATTERN: Final = re.compile(
    rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_REQUEST_ID_LENGTH - 1}}}"
)
MAX_SOURCE_LENGTH: Final = 128
MAX_PROMPT_BYTES: Final = 65536


def follow_up_aggregate_id(follow_up_id: str) -> UUID:
    return aggregate_id("follow-up", follow_up_id)


def follow_ups_of_run_key(run_id: str) -> str:
    """The index key under which every follow-up queued on ``run_id`` is found."""
    return f"follow-ups-of:{run_id}"


def check_request_id(request_id: object) -> str:
    """Upstream §4.2 step 1: a stable identifier of at most 512 characters."""
    if not isinstance(request_id, str) or REQUEST_ID_PATTERN.fullmatch(request_id) is None:
        raise InvalidRequestIdError(limit=MAX_REQUEST_ID_LENGTH)
    return request_id


def check_source(source: object) -> str:
    """Upstream §4.2 step 2: non-empty after trimming, at most 128 characters."""
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_SOURCE_LENGTH:
        raise InvalidSourceError(limit=MAX_SOURCE_LENGTH)
    return source


def check_prompt(prompt: object) -> str:
    """Upstream §4.2 steps 3-4: non-empty after trimming, at most 65536 UTF-8 bytes."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise EmptyPromptError()
    if len(prompt.encode("utf-8", "surrogatepass")) > MAX_PROMPT_BYTES:
        raise PromptTooLargeError(limit=MAX_PROMPT_BYTES)
    return prompt


class FollowUp(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """One follow-up; its state changes are queue, remove and cascade-cancel."""

    TOPIC = "follow-up"

    follow_up_id: str
    run_id: str
    request_id: str
    order: int
    target_session_id: str
    queued_by: dict[str, Any]
    source: str
    prompt: str
    workflow_message_id: str
    state: FollowUpState
    reason: str | None

    def __init__(self) -> None:
        """State is set by the Queued event."""

    class Event(LedgerEvent):
        """Base of every FollowUp event."""

    class Queued(Event, LedgerCreated):
        """A follow-up was queued on a run for its origin session."""

        TOPIC = "follow-up.queued"
        follow_up_id: str
        request_id: str
        order: int
        target_session_id: str
        source: str
        prompt: str
        workflow_message_id: str

        def lookup_key(self) -> str | None:
            return follow_ups_of_run_key(self.run_id)

        def apply(self, follow_up: FollowUp) -> None:
            follow_up.follow_up_id = self.follow_up_id
            follow_up.run_id = self.run_id
            follow_up.request_id = self.request_id
            follow_up.order = self.order
            follow_up.target_session_id = self.target_session_id
            follow_up.queued_by = dict(self.actor)
            follow_up.source = self.source
            follow_up.prompt = self.prompt
            follow_up.workflow_message_id = self.workflow_message_id
            follow_up.state = "queued"
            follow_up.reason = None

    class Removed(Event):
        """Its source or a human removed the follow-up before delivery."""

        TOPIC = "follow-up.removed"
        follow_up_id: str
        source: str
        reason: str

        def apply(self, follow_up: FollowUp) -> None:
            follow_up.state = "removed"
            follow_up.reason = self.reason

    class Cancelled(Event):
        """A bad end of its run (or a continuation of it) cancelled the follow-up."""

        TOPIC = "follow-up.cancelled"
        follow_up_id: str
        ended_run_id: str
        status: BadEndStatus
        reason: str

        def apply(self, follow_up: FollowUp) -> None:
            follow_up.state = "cancelled"
            follow_up.reason = self.reason

    class Snapshot(LedgerSnapshot):
        """The follow-up's state at a version."""

        TOPIC = "follow-up.snapshot"

    @classmethod
    def queue(
        cls,
        follow_up_id: str,
        *,
        run_id: str,
        request_id: str,
        order: int,
        target_session_id: str,
        actor: Actor,
        source: str,
        prompt: str,
        workflow_message_id: str,
        now: datetime,
    ) -> FollowUp:
        """Queue a follow-up with the order number its run gave it."""
        return cls._create(
            cls.Queued,
            id=follow_up_aggregate_id(follow_up_id),
            timestamp=now,
            actor=actor.to_json(),
            run_id=run_id,
            follow_up_id=follow_up_id,
            request_id=request_id,
            order=order,
            target_session_id=target_session_id,
            source=source,
            prompt=prompt,
            workflow_message_id=workflow_message_id,
        )

    def check_same_request(
        self, *, target_session_id: object, actor: Actor, source: str, prompt: str
    ) -> None:
        """A retried request must carry exactly the content first queued."""
        if (
            prompt != self.prompt
            or target_session_id != self.target_session_id
            or actor != self.actor
            or source != self.source
        ):
            raise FollowUpRequestReusedError()

    @property
    def actor(self) -> Actor:
        """Who queued it."""
        return Actor.from_json(self.queued_by)

    def check_part_of(self, run_id: object) -> None:
        """Upstream §4.3 step 3: a follow-up is removed through its own run."""
        if self.run_id != run_id:
            raise FollowUpNotInRunError(run_id)

    def check_removable_by(self, actor: Actor, source: str) -> None:
        """Upstream §4.3 steps 5-6: cancelled ones stay; only the source or a human removes."""
        if self.state == "cancelled":
            raise CancelledFollowUpRemovalError()
        if actor.type == "human":
            return
        if (
            actor.type in ("session", "controller")
            and actor == self.actor
            and source == self.source
        ):
            return
        raise FollowUpRemovalNotAllowedError()

    def remove(self, *, actor: Actor, source: str, now: datetime) -> None:
        """Record the removal, with upstream's reason text."""
        self.trigger_event(
            self.Removed,
            timestamp=now,
            actor=actor.to_json(),
            run_id=self.run_id,
            follow_up_id=self.follow_up_id,
            source=source,
            reason=REMOVED_REASON,
        )

    def cancel(
        self,
        *,
        ended_run_id: str,
        status: BadEndStatus,
        reason: str,
        actor: Actor,
        now: datetime,
    ) -> None:
        """Record the cancellation a bad end of ``ended_run_id`` set off."""
        self.trigger_event(
            self.Cancelled,
            timestamp=now,
            actor=actor.to_json(),
            run_id=self.run_id,
            follow_up_id=self.follow_up_id,
            ended_run_id=ended_run_id,
            status=status,
            reason=reason,
        )

    def to_record(self) -> FollowUpRecord:
        """The follow-up as ``get_follow_up`` returns it."""
        return FollowUpRecord(
            follow_up_id=self.follow_up_id,
            run_id=self.run_id,
            request_id=self.request_id,
            order=self.order,
            target_session_id=self.target_session_id,
            actor=self.actor,
            source=self.source,
            prompt=self.prompt,
            state=self.state,
            reason=self.reason,
            created_at=self.created_on,
            updated_at=self.modified_on,
        )
