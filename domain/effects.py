"""The Effect aggregate: a workflow step's side effect, applied exactly once (upstream §9.4).

State machine (decisions 17, 23, 26; the README has the table):

    (none) --reserve--> applying(1)
    applying --settle applied--> applied      applying --settle failed--> failed
    applying --recover, idempotent--> retry_ready
    applying --recover, manual--> ambiguous
    retry_ready --reserve--> applying(n+1)
    failed | ambiguous --retry--> retry_ready

Reserving again never starts a second copy of an attempt: applied is adopted, retry_ready
starts the next attempt, and anything else (applying, failed, ambiguous) is ambiguous, so a
caller that crashed between reserve and settle cannot apply the effect twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.canonical import check_plain_json, json_digest, sha256hex
from runledger.domain.errors import (
    EffectKeyReusedError,
    EffectNotApplyingError,
    EffectNotRetryableError,
    InvalidEffectLabelError,
    InvalidEffectOutcomeError,
    InvalidEffectRequestError,
)
from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id
from runledger.domain.records import EffectRecord
from runledger.domain.values import (
    EFFECT_OUTCOMES,
    EFFECT_RECOVERIES,
    Actor,
    EffectOutcome,
    EffectRecovery,
    EffectStatus,
    JsonValue,
    ReservationOutcome,
    is_one_of,
)

MAX_LABEL_LENGTH: Final = 256
DEFAULT_RECOVERY: Final[EffectRecovery] = "manual"


def effect_id_for(run_id: str, effect_type: str, key: str) -> str:
    """Decision 17: ``effect-<sha256(runId\\0type\\0key)[:40]>``."""
    return "effect-" + sha256hex(f"{run_id}\0{effect_type}\0{key}")[:40]


def effect_aggregate_id(effect_id: str) -> UUID:
    return aggregate_id("effect", effect_id)


def effects_of_run_key(run_id: str) -> str:
    """The index key under which every effect reserved for ``run_id`` is found."""
    return f"effects-of:{run_id}"


def check_label(label: str, value: object) -> str:
    """Upstream: type and key are 1..256 characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_LABEL_LENGTH:
        raise InvalidEffectLabelError(label, limit=MAX_LABEL_LENGTH)
    return value


def check_request(request: object) -> tuple[dict[str, Any], EffectRecovery]:
    """A request is a JSON object; its ``recovery`` says what a crash mid-attempt means."""
    if not isinstance(request, dict):
        raise InvalidEffectRequestError()
    check_plain_json(request, "request")
    recovery = request.get("recovery", DEFAULT_RECOVERY)
    if not is_one_of(recovery, EFFECT_RECOVERIES):
        raise InvalidEffectRequestError()
    return request, recovery


def check_outcome(outcome: object) -> EffectOutcome:
    if not is_one_of(outcome, EFFECT_OUTCOMES):
        raise InvalidEffectOutcomeError()
    return outcome


class Effect(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """One managed effect of a run, by its type and idempotency key."""

    TOPIC = "effect"

    effect_id: str
    run_id: str
    effect_type: str
    key: str
    request: dict[str, Any]
    request_digest: str
    recovery: EffectRecovery
    status: EffectStatus
    attempt: int
    outcome: EffectOutcome | None
    result: JsonValue

    def __init__(self) -> None:
        """State is set by the Reserved event."""

    class Event(LedgerEvent):
        """Base of every Effect event."""

        effect_id: str

    class Reserved(Event, LedgerCreated):
        """A step reserved the effect: attempt 1 is applying."""

        TOPIC = "effect.reserved"
        effect_type: str
        key: str
        request: dict[str, Any]
        request_digest: str
        recovery: EffectRecovery

        def lookup_key(self) -> str | None:
            return effects_of_run_key(self.run_id)

        def apply(self, effect: Effect) -> None:
            effect.effect_id = self.effect_id
            effect.run_id = self.run_id
            effect.effect_type = self.effect_type
            effect.key = self.key
            effect.request = self.request
            effect.request_digest = self.request_digest
            effect.recovery = self.recovery
            effect.status = "applying"
            effect.attempt = 1
            effect.outcome = None
            effect.result = None

    class AttemptStarted(Event):
        """A reservation after ``retry_ready`` started the next attempt."""

        TOPIC = "effect.attempt-started"
        attempt: int

        def apply(self, effect: Effect) -> None:
            effect.status = "applying"
            effect.attempt = self.attempt
            effect.outcome = None
            effect.result = None

    class Settled(Event):
        """The applying attempt ended: applied or failed."""

        TOPIC = "effect.settled"
        attempt: int
        outcome: EffectOutcome
        result: JsonValue

        def apply(self, effect: Effect) -> None:
            effect.status = self.outcome
            effect.outcome = self.outcome
            effect.result = self.result

    class RetryReady(Event):
        """The effect may be attempted again: recovered as idempotent, or retried by hand."""

        TOPIC = "effect.retry-ready"
        attempt: int
        reason: str

        def apply(self, effect: Effect) -> None:
            effect.status = "retry_ready"

    class BecameAmbiguous(Event):
        """Recovery found a manual effect still applying: nobody knows if it happened."""

        TOPIC = "effect.ambiguous"
        attempt: int

        def apply(self, effect: Effect) -> None:
            effect.status = "ambiguous"

    class Snapshot(LedgerSnapshot):
        """The effect at a version."""

        TOPIC = "effect.snapshot"

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def reserve_new(
        cls,
        effect_id: str,
        *,
        run_id: str,
        effect_type: str,
        key: str,
        request: dict[str, Any],
        recovery: EffectRecovery,
        actor: Actor,
        now: datetime,
    ) -> Effect:
        """The first reservation of this type and key on the run."""
        return cls._create(
            cls.Reserved,
            id=effect_aggregate_id(effect_id),
            timestamp=now,
            actor=actor.to_json(),
            run_id=run_id,
            effect_id=effect_id,
            effect_type=effect_type,
            key=key,
            request=request,
            request_digest=json_digest(request),
            recovery=recovery,
        )

    def reserve_again(
        self, request: dict[str, Any], *, actor: Actor, now: datetime
    ) -> ReservationOutcome:
        """A later reservation with the same key: adopt, start the next attempt, or say
        ambiguous; never a second copy of an attempt."""
        if json_digest(request) != self.request_digest:
            raise EffectKeyReusedError()
        if self.status == "applied":
            return "adopted"
        if self.status != "retry_ready":
            return "ambiguous"
        self._trigger(self.AttemptStarted, actor, now, attempt=self.attempt + 1)
        return "new_attempt"

    def settle(
        self,
        *,
        attempt: object,
        outcome: EffectOutcome,
        result: JsonValue,
        actor: Actor,
        now: datetime,
    ) -> None:
        """End the applying attempt; only the attempt that is applying may settle."""
        if self.status != "applying" or attempt != self.attempt or isinstance(attempt, bool):
            raise EffectNotApplyingError()
        check_plain_json(result, "result")
        self._trigger(
            self.Settled, actor, now, attempt=self.attempt, outcome=outcome, result=result
        )

    def recover(self, *, actor: Actor, now: datetime) -> bool:
        """After a crash: an applying idempotent effect may run again, a manual one becomes
        ambiguous. Returns whether it became ambiguous."""
        if self.status != "applying":
            return False
        if self.recovery == "idempotent":
            self._trigger(self.RetryReady, actor, now, attempt=self.attempt, reason="recovered")
            return False
        self._trigger(self.BecameAmbiguous, actor, now, attempt=self.attempt)
        return True

    def retry(self, *, actor: Actor, now: datetime) -> None:
        """An operator decided a failed or ambiguous effect may be attempted again."""
        if self.status not in ("failed", "ambiguous"):
            raise EffectNotRetryableError(self.status)
        self._trigger(self.RetryReady, actor, now, attempt=self.attempt, reason="retry")

    def _trigger(
        self, event_class: type[Effect.Event], actor: Actor, now: datetime, **kwargs: Any
    ) -> None:
        self.trigger_event(
            event_class,
            timestamp=now,
            actor=actor.to_json(),
            run_id=self.run_id,
            effect_id=self.effect_id,
            **kwargs,
        )

    def to_record(self) -> EffectRecord:
        """The effect as ``get_effect`` returns it."""
        return EffectRecord(
            effect_id=self.effect_id,
            run_id=self.run_id,
            effect_type=self.effect_type,
            key=self.key,
            request=self.request,
            request_digest=self.request_digest,
            recovery=self.recovery,
            status=self.status,
            attempt=self.attempt,
            outcome=self.outcome,
            result=self.result,
            created_at=self.created_on,
            updated_at=self.modified_on,
        )
