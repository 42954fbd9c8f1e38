"""Value objects and the closed vocabularies of the workflow domain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, get_args

from runledger.domain.errors import InvalidActorError, UnknownActorTypeError

JsonValue: TypeAlias = Any
"""A plain JSON value: dict with str keys, list, str, int, float, bool or None."""

ActorType = Literal[
    "session", "host", "controller", "channel", "human", "policy", "control", "system"
]
ACTOR_TYPES: Final[tuple[str, ...]] = get_args(ActorType)

RunStatus = Literal["queued", "running", "waiting", "completed", "failed", "timed_out", "cancelled"]
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset(
    {"completed", "failed", "timed_out", "cancelled"}
)
BAD_END_STATUSES: Final[frozenset[str]] = frozenset({"failed", "timed_out", "cancelled"})
PROGRESS_STATUSES: Final[tuple[str, ...]] = ("running", "waiting")
FINISH_STATUSES: Final[tuple[str, ...]] = ("completed", "failed", "timed_out", "cancelled")
CHANGEABLE_STATUSES: Final[frozenset[str]] = frozenset({"running", "waiting"})

ExecutionMode = Literal["interactive", "headless"]
LineageKind = Literal["continuation", "restart"]
FollowUpState = Literal["queued", "removed", "cancelled"]
MessageKind = Literal["step", "decision", "notification", "terminal", "followUp"]
MESSAGE_KINDS: Final[tuple[str, ...]] = get_args(MessageKind)
HOST_MESSAGE_KINDS: Final[tuple[str, ...]] = ("step", "decision", "notification")
MessageStatus = Literal["pending", "sent", "cancelled"]
Delivery = Literal["pending", "sent", "cancelled"]
TurnState = Literal["started", "ended"]
StopReason = Literal["completed", "aborted", "error", "lost"]
STOP_REASONS: Final[tuple[str, ...]] = get_args(StopReason)

RESTART_LIMIT: Final[int] = 3
DEFAULT_PRESENTATION_INSTRUCTIONS: Final[str] = (
    "Explain the final workflow result to the user in a normal response."
)
INTERRUPTED_REASON: Final[str] = "Workflow host stopped before the run finished"
REMOVED_REASON: Final[str] = "Removed before delivery"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: one of the upstream actor types and an optional id (None is "no id")."""

    type: str
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, str):
            raise InvalidActorError()
        if self.type not in ACTOR_TYPES:
            raise UnknownActorTypeError(self.type)
        if self.id is not None and not isinstance(self.id, str):
            raise InvalidActorError()

    def to_json(self) -> dict[str, str | None]:
        return {"type": self.type, "id": self.id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Actor:
        return cls(data["type"], data.get("id"))

    @classmethod
    def coerce(cls, value: object) -> Actor:
        """Accept an Actor or its JSON form; anything else is a clear error."""
        if isinstance(value, Actor):
            return value
        if isinstance(value, dict) and "type" in value:
            return cls.from_json(value)
        raise InvalidActorError()


SYSTEM: Final[Actor] = Actor("system")


DecisionStatus = Literal["pending", "accepted", "cancelled"]
DecisionProvenance = Literal["human", "timeout_policy", "explicit_cancel", "expired_no_default"]
CANCEL_PROVENANCES: Final[tuple[str, ...]] = ("explicit_cancel", "expired_no_default")
SubmissionOutcome = Literal["won", "adopted", "already_resolved", "conflict"]
