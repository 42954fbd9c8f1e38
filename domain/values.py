"""Value objects and the closed vocabularies of the workflow domain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, TypeGuard, TypeVar, get_args

from runledger.domain.errors import (
    InvalidActorError,
    InvalidArgumentTypeError,
    UnknownActorTypeError,
)

JsonValue: TypeAlias = Any
"""A plain JSON value: dict with str keys, list, str, int, float, bool or None."""

Word = TypeVar("Word", bound=str)


def is_one_of(value: object, vocabulary: tuple[Word, ...]) -> TypeGuard[Word]:
    """Whether ``value`` is a word of the vocabulary (so it has the vocabulary's type)."""
    return isinstance(value, str) and value in vocabulary


def looked_up_id(name: str, value: object) -> str:
    """An id a lookup takes: text (any text; an id that names nothing is looked up and not
    found), never another type, which would only ever find nothing."""
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(name=name, expected="text", kind=type(value).__name__)
    return value


MAX_COUNT: Final[int] = 2**63 - 1
"""The largest position, limit or offset: what every backend's 64-bit integers hold."""


def is_count(value: object, at_most: int | None = MAX_COUNT) -> TypeGuard[int]:
    """A non-negative int, not a bool, of at most ``at_most``: by default a page position,
    limit or offset every backend holds; ``None`` for upstream's unbounded counts."""
    # bool is an int subclass; upstream's Number.isInteger(true) is false, keep that.
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 0
        and (at_most is None or value <= at_most)
    )


ActorType = Literal[
    "session", "host", "controller", "channel", "human", "policy", "control", "system"
]
ACTOR_TYPES: Final[tuple[ActorType, ...]] = get_args(ActorType)

# Run statuses (upstream §3.1), nested so each set has exactly one name.
ProgressStatus = Literal["running", "waiting"]
"""A run in progress: the only statuses that accept changes and that progress records."""
BadEndStatus = Literal["failed", "timed_out", "cancelled"]
"""An end that cancels queued follow-ups (upstream §4.6)."""
TerminalStatus = Literal["completed", BadEndStatus]
"""An ended run (upstream: the last four are terminal); what ``finish_run`` takes."""
StartStatus = Literal["queued", ProgressStatus]
"""What a new run starts as: reserved (no worker has started it, decision 13), or in progress."""
RunStatus = Literal[StartStatus, TerminalStatus]
PROGRESS_STATUSES: Final[tuple[ProgressStatus, ...]] = get_args(ProgressStatus)
START_STATUSES: Final[tuple[StartStatus, ...]] = get_args(StartStatus)
BAD_END_STATUSES: Final[tuple[BadEndStatus, ...]] = get_args(BadEndStatus)
TERMINAL_STATUSES: Final[tuple[TerminalStatus, ...]] = get_args(TerminalStatus)
RUN_STATUSES: Final[tuple[RunStatus, ...]] = (*START_STATUSES, *TERMINAL_STATUSES)

ExecutionMode = Literal["interactive", "headless"]
EXECUTION_MODES: Final[tuple[ExecutionMode, ...]] = get_args(ExecutionMode)
LineageKind = Literal["continuation", "restart"]
FollowUpState = Literal["queued", "removed", "cancelled"]
HostMessageKind = Literal["step", "decision", "notification"]
"""The kinds a host creates directly; follow-up and terminal messages come from commands."""
MessageKind = Literal[HostMessageKind, "terminal", "followUp"]
MESSAGE_KINDS: Final[tuple[MessageKind, ...]] = get_args(MessageKind)
HOST_MESSAGE_KINDS: Final[tuple[HostMessageKind, ...]] = get_args(HostMessageKind)
MessageStatus = Literal["pending", "sent", "cancelled"]
TurnState = Literal["started", "ended"]
ViewerTargetType = Literal["graph", "timeline", "inspector", "conversation"]
StopReason = Literal["completed", "aborted", "error", "lost"]
STOP_REASONS: Final[tuple[StopReason, ...]] = get_args(StopReason)

RESTART_LIMIT: Final[int] = 3

# Limits on every argument of a public command or query, checked before anything is written
# (the README's "Limits" lists them). They are a safety net above upstream's own limits
# (decision 28): a value whose canonical JSON fits in MAX_ARGUMENT_TEXT_BYTES passes both
# (its text is at most that many bytes, and each of its values takes a byte of it at least),
# and an argument whose upstream rule bounds its size is sized by that rule, not here
# (``arguments.SIZED_BY_RULES``). The depth keeps stored events well inside the JSON
# encoder's own limit (254) even after a command nests the value in a message's content.
MAX_JSON_DEPTH: Final[int] = 64
"""Nesting levels of lists and objects in one argument (``[]`` is one level)."""
MAX_ARGUMENT_TEXT_BYTES: Final[int] = 1_048_576
"""UTF-8 bytes of all the text in one argument, object keys included: upstream's largest
limit on one value (a session event record, §3.12)."""
MAX_ARGUMENT_VALUES: Final[int] = MAX_ARGUMENT_TEXT_BYTES
"""Values in one argument, counting every list item, object key and object value."""
MAX_SESSION_BATCH_BYTES: Final[int] = 64 * MAX_ARGUMENT_TEXT_BYTES
"""Canonical bytes of one ``append_session_events`` batch, its records summed: upstream bounds
each record (1 MiB) but not the batch, so 64 records of 1 MiB each fit."""
MAX_KEY_TEXT_BYTES: Final[int] = 1_024
"""UTF-8 bytes of a session id or a mount path, text that keys the read models' indexes:
PostgreSQL's btree holds at most 2,704 bytes an entry, and one index holds a session id
beside a status (a longer one stalled every read model there, while the event committed)."""
DEFAULT_PRESENTATION_INSTRUCTIONS: Final[str] = (
    "Explain the final workflow result to the user in a normal response."
)
INTERRUPTED_REASON: Final[str] = "Workflow host stopped before the run finished"
REMOVED_REASON: Final[str] = "Removed before delivery"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: one of the upstream actor types and an optional id (None is "no id").

    Commands take it and records return it (pydantic accepts the dataclass as a field), so
    ``record.actor == Actor("session", "s1")`` holds.
    """

    type: ActorType
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, str):
            raise InvalidActorError()
        if self.type not in ACTOR_TYPES:
            raise UnknownActorTypeError(actor_type=self.type, known=ACTOR_TYPES)
        if self.id is not None and not isinstance(self.id, str):
            raise InvalidActorError()

    def to_json(self) -> dict[str, str | None]:
        """The ``{type, id}`` form events store."""
        return {"type": self.type, "id": self.id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Actor:
        """The actor of a stored ``{type, id}`` (a missing id is None)."""
        return cls(data["type"], data.get("id"))

    @classmethod
    def of_session(cls, session_id: object) -> Actor:
        """The Pi session acting; an id that is not text is left out (the command rejects it)."""
        return cls("session", session_id if isinstance(session_id, str) else None)

    @classmethod
    def coerce(cls, value: object) -> Actor:
        """Accept an Actor or its JSON form; anything else is a clear error."""
        if isinstance(value, Actor):
            return value
        # The JSON form is converted explicitly (the HTTP API and hosts reading stored actors
        # pass it), and only with exactly its own keys: a typo must not pass as no id.
        if isinstance(value, dict) and "type" in value and set(value) <= {"type", "id"}:
            return cls.from_json(value)
        raise InvalidActorError()


SYSTEM: Final[Actor] = Actor("system")
"""The store itself, acting on a rule (the end-of-run cascade)."""
HOST: Final[Actor] = Actor("host")
"""The embedding host, the actor of every run command."""


DecisionStatus = Literal["pending", "accepted", "cancelled"]
DecisionProvenance = Literal["human", "timeout_policy", "explicit_cancel", "expired_no_default"]
CANCEL_PROVENANCES: Final[tuple[str, ...]] = ("explicit_cancel", "expired_no_default")
SubmissionOutcome = Literal["won", "adopted", "already_resolved", "conflict"]

# -- run leases, managed effects and session recording ------------------------------------

FenceReason = Literal[
    "missingAuthority", "expired", "ownerChanged", "tokenChanged", "generationChanged"
]
"""Why a write lost its claim (upstream ClaimLostError reasons)."""
EffectStatus = Literal["applying", "applied", "failed", "retry_ready", "ambiguous"]
EffectOutcome = Literal["applied", "failed"]
EFFECT_OUTCOMES: Final[tuple[EffectOutcome, ...]] = get_args(EffectOutcome)
EffectRecovery = Literal["idempotent", "manual"]
EFFECT_RECOVERIES: Final[tuple[EffectRecovery, ...]] = get_args(EffectRecovery)
ReservationOutcome = Literal["new", "adopted", "new_attempt", "ambiguous"]
RecoveryVerdict = Literal["safe", "ambiguous"]
CaptureStatus = Literal["recording", "complete", "failed"]
CAPTURE_STATUSES: Final[tuple[CaptureStatus, ...]] = get_args(CaptureStatus)
SessionEventType = Literal[
    "turn_started",
    "turn_finished",
    "message_started",
    "assistant_event",
    "message_finished",
    "tool_execution_started",
    "tool_execution_finished",
]
SESSION_EVENT_TYPES: Final[tuple[SessionEventType, ...]] = get_args(SessionEventType)
Integrity = Literal["valid", "invalid"]
