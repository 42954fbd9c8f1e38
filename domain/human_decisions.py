"""The HumanDecision aggregate: a protected choice at one node attempt, resolved exactly once.

Upstream §9.3 with DESIGN decisions 15, 20 and 26: the request is immutable, the first
accepted answer (or the timeout policy) wins for ever, later answers are recorded with their
outcome, and an accepted decision leads to one continuation child carrying its receipt (§3.7).
"""

from __future__ import annotations

import re
from copy import deepcopy
from datetime import datetime
from typing import Any, ClassVar, Final, TypeGuard
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.canonical import canonical_json, check_plain_json, json_digest
from runledger.domain.errors import (
    DecisionAlreadyAcceptedError,
    DecisionContinuationConflictError,
    DecisionExpiredError,
    DecisionHasTimeoutDefaultError,
    DecisionNotAcceptedError,
    DecisionRequestConflictError,
    DecisionResponseNotAChoiceError,
    DecisionRunMissingError,
    DecisionTimeoutNotEligibleError,
    InvalidCancellationProvenanceError,
    InvalidDecisionFieldError,
    InvalidDecisionFlagError,
    InvalidDecisionJsonError,
    InvalidDecisionRequestError,
    InvalidDecisionResponseError,
)
from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id, decision_subject
from runledger.domain.records import HumanDecisionRecord, SubmissionRecord
from runledger.domain.runs import RUN_ID_PATTERN
from runledger.domain.values import (
    CANCEL_PROVENANCES,
    Actor,
    DecisionProvenance,
    DecisionStatus,
    JsonValue,
    SubmissionOutcome,
)

RECEIPT_SCHEMA: Final = "pi-workflows.human-decision-receipt.v1"
DECISION_ID_PATTERN: Final = re.compile(r"decision-[0-9a-f]{40}")
MAX_IDENTIFIER_LENGTH: Final = 512
MAX_JSON_DEPTH: Final = 64
MAX_JSON_BYTES: Final = 65536
POLICY: Final = Actor("policy")
CONTROL: Final = Actor("control")


def decision_aggregate_id(decision_id: str) -> UUID:
    return aggregate_id("decision", decision_id)


def is_decision_id(decision_id: object) -> TypeGuard[str]:
    """Only ``decision_id_for`` makes decision ids, so anything else names no decision."""
    return isinstance(decision_id, str) and DECISION_ID_PATTERN.fullmatch(decision_id) is not None


def check_decision_run_id(run_id: object) -> str:
    """A run id no run can have names a missing run (upstream's message, not a format error)."""
    if not isinstance(run_id, str) or RUN_ID_PATTERN.fullmatch(run_id) is None:
        raise DecisionRunMissingError(run_id)
    return run_id


# -- input rules (pure; checked before anything is loaded) --------------------------------


def check_identifier(name: str, value: object) -> str:
    """Node, attempt and submission ids: non-empty text of at most 512 characters."""
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_IDENTIFIER_LENGTH
        or not _encodable(value)
    ):
        raise InvalidDecisionFieldError(name, limit=MAX_IDENTIFIER_LENGTH)
    return value


def check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidDecisionFlagError(name)
    return value


def check_json_value(name: str, value: object) -> None:
    """A plain JSON value the store can hold: UTF-8 text, bounded depth and size."""
    if not _shallow_and_encodable(value, MAX_JSON_DEPTH):
        raise InvalidDecisionJsonError(name, depth=MAX_JSON_DEPTH, size=MAX_JSON_BYTES)
    # The canonical-JSON errors (non-finite numbers, non-text keys, other types) name where.
    check_plain_json(value, name)
    text = canonical_json(value)
    if len(text.encode("utf-8")) > MAX_JSON_BYTES:
        raise InvalidDecisionJsonError(name, depth=MAX_JSON_DEPTH, size=MAX_JSON_BYTES)


def check_request(request: object) -> dict[str, JsonValue]:
    """Decision 20's request shape; the default response must itself be a valid answer."""
    if not isinstance(request, dict):
        raise InvalidDecisionRequestError("must be a JSON object")
    check_json_value("request", request)
    title = request.get("title")
    if not isinstance(title, str) or not title.strip():
        raise InvalidDecisionRequestError("title must be non-empty text")
    choices = _choices_of(request)
    _deadline_of(request)
    if "defaultResponse" in request:
        check_response(request["defaultResponse"], choices)
    # The caller keeps its dict; the aggregate (and its cached copies) must not share it.
    return deepcopy(request)


def check_response(response: object, choices: list[str] | None) -> dict[str, JsonValue]:
    """An answer is a JSON object; with ``choices`` it is ``{"choice": <one of them>}``."""
    if not isinstance(response, dict):
        raise InvalidDecisionResponseError()
    check_json_value("response", response)
    if choices is not None and response.get("choice") not in choices:
        raise DecisionResponseNotAChoiceError()
    return deepcopy(response)


def check_cancel_provenance(provenance: object) -> DecisionProvenance:
    if provenance == "explicit_cancel" or provenance == "expired_no_default":
        return provenance
    raise InvalidCancellationProvenanceError(", ".join(CANCEL_PROVENANCES))


def _choices_of(request: dict[str, JsonValue]) -> list[str] | None:
    if "choices" not in request:
        return None
    choices = request["choices"]
    if (
        not isinstance(choices, list)
        or not choices
        or not all(isinstance(choice, str) and choice.strip() for choice in choices)
        or len(set(choices)) != len(choices)
    ):
        raise InvalidDecisionRequestError("choices must be distinct non-empty strings")
    return choices


def _deadline_of(request: dict[str, JsonValue]) -> datetime | None:
    if "expiresAt" not in request:
        return None
    expires_at = request["expiresAt"]
    try:
        deadline = datetime.fromisoformat(expires_at) if isinstance(expires_at, str) else None
    except ValueError:
        deadline = None
    # A deadline without an offset would mean a different instant on every host.
    if deadline is None or deadline.tzinfo is None:
        raise InvalidDecisionRequestError("expiresAt must be an ISO-8601 time with a UTC offset")
    return deadline


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shallow_and_encodable(value: object, depth: int) -> bool:
    # Checked before canonical JSON so a deep value never reaches Python's recursion limit.
    if isinstance(value, str):
        return _encodable(value)
    if isinstance(value, dict):
        keys_encodable = all(not isinstance(key, str) or _encodable(key) for key in value)
        return (
            depth > 0
            and keys_encodable
            and all(_shallow_and_encodable(item, depth - 1) for item in value.values())
        )
    if isinstance(value, (list, tuple)):
        return depth > 0 and all(_shallow_and_encodable(item, depth - 1) for item in value)
    return True


# -- the aggregate ------------------------------------------------------------------------


class HumanDecision(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """One decision; its resolution is accepted (an answer or the timeout default) or cancelled."""

    TOPIC = "decision"
    DATETIME_FIELDS: ClassVar[tuple[str, ...]] = ("expires_at", "resolved_at")

    decision_id: str
    run_id: str
    node_id: str
    attempt_id: str
    request: dict[str, JsonValue]
    request_digest: str
    expires_at: datetime | None
    status: DecisionStatus
    provenance: DecisionProvenance | None
    response: dict[str, JsonValue] | None
    answer_digest: str | None
    resolved_at: datetime | None
    revision: int | None
    continuation_run_id: str | None
    submissions: dict[str, dict[str, Any]]

    def __init__(self) -> None:
        """State is set by the Requested event."""

    class Event(LedgerEvent):
        pass

    class Requested(Event, LedgerCreated):
        TOPIC = "decision.requested"
        decision_id: str
        node_id: str
        attempt_id: str
        request: dict[str, JsonValue]
        request_digest: str

        def apply(self, decision: HumanDecision) -> None:
            decision.decision_id = self.decision_id
            decision.run_id = self.run_id
            decision.node_id = self.node_id
            decision.attempt_id = self.attempt_id
            decision.request = self.request
            decision.request_digest = self.request_digest
            decision.expires_at = _deadline_of(self.request)
            decision.status = "pending"
            decision.provenance = None
            decision.response = None
            decision.answer_digest = None
            decision.resolved_at = None
            decision.revision = None
            decision.continuation_run_id = None
            decision.submissions = {}

    class AnswerSubmitted(Event):
        TOPIC = "decision.answer-submitted"
        decision_id: str
        submission_id: str
        response: dict[str, JsonValue]
        answer_digest: str
        outcome: SubmissionOutcome

        def apply(self, decision: HumanDecision) -> None:
            # Copy-on-write: a cached copy of the aggregate shares the previous dict.
            decision.submissions = {
                **decision.submissions,
                self.submission_id: {
                    "actor": dict(self.actor),
                    "answer_digest": self.answer_digest,
                    "outcome": self.outcome,
                    "submitted_at": self.timestamp.isoformat(),
                },
            }

    class Accepted(Event):
        TOPIC = "decision.accepted"
        decision_id: str
        provenance: DecisionProvenance
        submission_id: str | None
        response: dict[str, JsonValue]
        answer_digest: str

        def apply(self, decision: HumanDecision) -> None:
            decision.status = "accepted"
            decision.provenance = self.provenance
            decision.response = self.response
            decision.answer_digest = self.answer_digest
            decision.resolved_at = self.timestamp
            decision.revision = self.originator_version

    class Cancelled(Event):
        TOPIC = "decision.cancelled"
        decision_id: str
        provenance: DecisionProvenance

        def apply(self, decision: HumanDecision) -> None:
            decision.status = "cancelled"
            decision.provenance = self.provenance
            decision.resolved_at = self.timestamp

    class ContinuationCreated(Event):
        TOPIC = "decision.continuation-created"
        decision_id: str
        continuation_run_id: str

        def apply(self, decision: HumanDecision) -> None:
            decision.continuation_run_id = self.continuation_run_id

    class Snapshot(LedgerSnapshot):
        TOPIC = "decision.snapshot"

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        decision_id: str,
        *,
        run_id: str,
        node_id: str,
        attempt_id: str,
        request: dict[str, JsonValue],
        actor: Actor,
        now: datetime,
    ) -> HumanDecision:
        """Open the decision of one node attempt with a checked request."""
        return cls._create(
            cls.Requested,
            id=decision_aggregate_id(decision_id),
            timestamp=now,
            actor=actor.to_json(),
            run_id=run_id,
            decision_id=decision_id,
            node_id=node_id,
            attempt_id=attempt_id,
            request=request,
            request_digest=json_digest(request),
        )

    def check_same_request(self, request: dict[str, JsonValue]) -> None:
        """The request of a node attempt is immutable: only a canonically equal one adopts."""
        if json_digest(request) != self.request_digest:
            raise DecisionRequestConflictError()

    def submit(
        self, submission_id: str, response: object, *, actor: Actor, now: datetime
    ) -> SubmissionOutcome:
        """Answer the decision; returns the outcome (won, adopted, already_resolved, conflict)."""
        answer = check_response(response, self.choices)
        digest = json_digest(answer)
        if self.status != "pending":
            return self._submit_after_resolution(submission_id, answer, digest, actor, now)
        self.check_not_expired(now)
        self._trigger(
            self.AnswerSubmitted,
            actor,
            now,
            submission_id=submission_id,
            response=answer,
            answer_digest=digest,
            outcome="won",
        )
        self._accept("human", answer, submission_id=submission_id, actor=actor, now=now)
        return "won"

    def _submit_after_resolution(
        self,
        submission_id: str,
        answer: dict[str, JsonValue],
        digest: str,
        actor: Actor,
        now: datetime,
    ) -> SubmissionOutcome:
        prior = self.submissions.get(submission_id)
        if prior is not None and prior["answer_digest"] == digest:
            # A retried submission gets its first answer again, and writes nothing.
            outcome: SubmissionOutcome = prior["outcome"]
            return "adopted" if outcome == "won" else outcome
        same = self.status == "cancelled" or digest == self.answer_digest
        outcome = "already_resolved" if same else "conflict"
        if prior is None:
            self._trigger(
                self.AnswerSubmitted,
                actor,
                now,
                submission_id=submission_id,
                response=answer,
                answer_digest=digest,
                outcome=outcome,
            )
        return outcome

    def apply_timeout(self, *, now: datetime) -> None:
        """At the deadline the default answer is accepted; without one the decision lapses."""
        if self.status != "pending":
            return
        self.check_timeout_eligible(now)
        default = self.default_response
        if default is None:
            self._trigger(self.Cancelled, POLICY, now, provenance="expired_no_default")
        else:
            self._accept("timeout_policy", default, submission_id=None, actor=POLICY, now=now)

    def cancel(self, provenance: DecisionProvenance, *, now: datetime) -> None:
        """Cancel a pending decision; cancelling a cancelled one again changes nothing."""
        if self.status == "cancelled":
            return
        if self.status == "accepted":
            raise DecisionAlreadyAcceptedError(self.decision_id)
        if provenance == "expired_no_default":
            self.check_timeout_eligible(now)
            if self.default_response is not None:
                raise DecisionHasTimeoutDefaultError(self.decision_id)
            actor = POLICY
        else:
            actor = CONTROL
        self._trigger(self.Cancelled, actor, now, provenance=provenance)

    def record_continuation(self, continuation_run_id: str, *, actor: Actor, now: datetime) -> None:
        self._trigger(self.ContinuationCreated, actor, now, continuation_run_id=continuation_run_id)

    def _accept(
        self,
        provenance: str,
        answer: dict[str, JsonValue],
        *,
        submission_id: str | None,
        actor: Actor,
        now: datetime,
    ) -> None:
        self._trigger(
            self.Accepted,
            actor,
            now,
            provenance=provenance,
            submission_id=submission_id,
            response=answer,
            answer_digest=json_digest(answer),
        )

    def _trigger(
        self, event_class: type[HumanDecision.Event], actor: Actor, now: datetime, **kwargs: Any
    ) -> None:
        self.trigger_event(
            event_class,
            timestamp=now,
            actor=actor.to_json(),
            run_id=self.run_id,
            decision_id=self.decision_id,
            **kwargs,
        )

    # -- rules ----------------------------------------------------------------------------

    @property
    def choices(self) -> list[str] | None:
        return _choices_of(self.request)

    @property
    def default_response(self) -> dict[str, JsonValue] | None:
        default = self.request.get("defaultResponse")
        return default if isinstance(default, dict) else None

    def check_not_expired(self, now: datetime) -> None:
        # At the deadline itself the timeout policy owns the decision, not a late answer.
        if self.expires_at is not None and now >= self.expires_at:
            raise DecisionExpiredError()

    def check_timeout_eligible(self, now: datetime) -> None:
        if self.expires_at is None or now < self.expires_at:
            raise DecisionTimeoutNotEligibleError()

    def check_accepted(self) -> None:
        if self.status != "accepted":
            raise DecisionNotAcceptedError(self.decision_id)

    def continued_into(self, continuation_run_id: str) -> bool:
        """Whether this decision already continued into that run; into another is a conflict."""
        if self.continuation_run_id is None:
            return False
        if self.continuation_run_id != continuation_run_id:
            raise DecisionContinuationConflictError()
        return True

    def receipt(self) -> dict[str, JsonValue]:
        """The §3.7 receipt a continuation child carries (decisions 20 and 26)."""
        self.check_accepted()
        return {
            "schema": RECEIPT_SCHEMA,
            "decisionId": self.decision_id,
            "requestDigest": self.request_digest,
            "nodeId": self.node_id,
            "response": self.response,
            "provenance": "timeout" if self.provenance == "timeout_policy" else "human",
            "acceptedAt": None if self.resolved_at is None else self.resolved_at.isoformat(),
            "answerDigest": self.answer_digest,
            "subjectDigest": json_digest(
                decision_subject(self.run_id, self.node_id, self.attempt_id)
            ),
            "presentationDigest": json_digest(self.request),
            "revision": self.revision,
        }

    def to_record(self, *, adopted: bool = False) -> HumanDecisionRecord:
        return HumanDecisionRecord(
            decision_id=self.decision_id,
            run_id=self.run_id,
            node_id=self.node_id,
            attempt_id=self.attempt_id,
            request=self.request,
            request_digest=self.request_digest,
            expires_at=self.expires_at,
            default_response=self.default_response,
            status=self.status,
            provenance=self.provenance,
            response=self.response,
            answer_digest=self.answer_digest,
            resolved_at=self.resolved_at,
            revision=self.revision,
            continuation_run_id=self.continuation_run_id,
            submissions=[
                SubmissionRecord(
                    submission_id=submission_id,
                    actor=Actor.from_json(entry["actor"]),
                    answer_digest=entry["answer_digest"],
                    outcome=entry["outcome"],
                    submitted_at=datetime.fromisoformat(entry["submitted_at"]),
                )
                for submission_id, entry in self.submissions.items()
            ],
            created_at=self.created_on,
            updated_at=self.modified_on,
            adopted=adopted,
        )
