"""Every failure a command or query can report, each with a stable kebab ``code``.

Messages are the exact upstream (pi-workflows 0.16.2) strings where upstream has one; each
text lives only here, in its class's ``template``.
"""

from __future__ import annotations

import reprlib
from typing import ClassVar, Final

from runledger.domain.json_strings import json_string

MAX_SHOWN_CHARACTERS: Final = 1024
"""How much of a caller's value a message quotes: a 10 MB id must not make a 10 MB error."""


def _bounded_repr() -> reprlib.Repr:
    bounded = reprlib.Repr()  # Python 3.11's Repr takes no limits as arguments
    bounded.maxlevel, bounded.maxstring, bounded.maxother = 3, 80, 80
    return bounded


_BOUNDED: Final = _bounded_repr()


def shown(value: object) -> object:
    """``value`` as a message may quote it: bounded in size and depth, printable as UTF-8.

    Whatever a caller passed ends up in the message of the error that rejects it, so this is
    what keeps a 2,000-deep list from a ``RecursionError``, a lone surrogate from a
    ``UnicodeEncodeError`` when the message is printed, and a huge int from ``str``'s limit.
    """
    if isinstance(value, str):
        # Escaped first, then cut: a lone surrogate takes six characters once escaped.
        printable = value.encode("utf-8", "backslashreplace").decode("utf-8")
        if len(printable) <= MAX_SHOWN_CHARACTERS:
            return printable
        return printable[:MAX_SHOWN_CHARACTERS] + "…"
    if value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 256 else f"<an integer of {value.bit_length()} bits>"
    return _BOUNDED.repr(value)


class WorkflowError(Exception):
    """Root of every error runledger reports on purpose."""

    code: ClassVar[str] = "workflow-error"
    template: ClassVar[str] = "{message}"
    retryable: ClassVar[bool] = False
    """Whether the same call may succeed later unchanged (a host retries only those)."""

    def __init__(self, **fields: object) -> None:
        # Each subclass names its fields in a typed ``__init__``; a caller's values are
        # quoted through ``shown``, whatever they are.
        message = self.template.format(**{name: shown(value) for name, value in fields.items()})
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# -- text rules ---------------------------------------------------------------------------


class InvalidRequestIdError(WorkflowError):
    code = "request.invalid-id"
    template = "Workflow request ID must be a stable identifier of at most {limit} characters"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class InvalidSourceError(WorkflowError):
    code = "request.invalid-source"
    template = "Workflow change source must be a non-empty string of at most {limit} characters"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class UnknownActorTypeError(WorkflowError):
    code = "actor.unknown-type"
    template = "Unknown saved actor type: {actor_type}{known}"

    def __init__(self, actor_type: str, known: tuple[str, ...] = ()) -> None:
        # Upstream's message for a stored actor; a caller's Actor also hears the valid types.
        listed = f" (actor types: {', '.join(known)})" if known else ""
        super().__init__(actor_type=actor_type, known=listed)


class InvalidActorError(WorkflowError):
    code = "actor.invalid"
    template = "Workflow actor must be an Actor with a known type and an optional text id"


class _LocatedJsonError(WorkflowError):
    """A value that is no canonical JSON; upstream's message, then where in which argument
    the offending value is (``input.when``, ``records[0].payload``) when the caller knows."""

    def __init__(self, where: str | None = None) -> None:
        super().__init__(where="" if where is None else f" ({where})")
        self.where = where


class NonFiniteJsonNumberError(_LocatedJsonError):
    code = "json.non-finite-number"
    template = "JSON numbers must be finite{where}"


class JsonIntegerTooLargeError(_LocatedJsonError):
    code = "json.integer-too-large"
    template = "JSON integers must be between -2^63 and 2^64 - 1 to be stored{where}"


class NotPlainJsonError(_LocatedJsonError):
    code = "json.not-plain"
    template = "Only plain objects can be stored as canonical JSON{where}"


class InvalidArgumentTypeError(WorkflowError):
    code = "argument.wrong-type"
    template = "Workflow argument {name} must be {expected}, not {kind}"

    def __init__(self, name: str, expected: str, kind: str) -> None:
        super().__init__(name=name, expected=expected, kind=kind)


class InvalidCallError(WorkflowError):
    code = "argument.invalid-call"
    template = "{problem}; WorkflowStore.{command} takes {signature}"

    def __init__(self, problem: str, command: str, signature: str) -> None:
        super().__init__(problem=problem, command=command, signature=signature)


class InvalidTextError(WorkflowError):
    code = "text.invalid"
    template = (
        "Workflow argument {name} must be Unicode text without lone surrogates or NUL characters"
    )

    def __init__(self, name: str) -> None:
        super().__init__(name=name)


class ValueTooDeepError(WorkflowError):
    code = "json.too-deep"
    template = "Workflow argument {name} is nested more than {limit} levels deep"

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(name=name, limit=limit)


class ValueTooLargeError(WorkflowError):
    code = "json.too-large"
    template = (
        "Workflow argument {name} holds more than {values} values or {text_bytes} bytes of text"
    )

    def __init__(self, name: str, values: int, text_bytes: int) -> None:
        super().__init__(name=name, values=values, text_bytes=text_bytes)


class KeyTooLongError(WorkflowError):
    code = "text.key-too-long"
    template = "Workflow argument {name} is longer than {limit} bytes of UTF-8"

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(name=name, limit=limit)


# -- runs ---------------------------------------------------------------------------------


class InvalidRunIdError(WorkflowError):
    code = "run.invalid-id"
    template = "Invalid workflow run id: {run_id}"

    def __init__(self, run_id: object) -> None:
        # Upstream quotes the id with JSON.stringify: non-ASCII stays as it is.
        super().__init__(
            run_id=json_string(run_id if isinstance(run_id, str) else str(shown(run_id)))
        )


class InvalidWorkflowNameError(WorkflowError):
    code = "run.invalid-workflow-name"
    template = "Workflow name must be a non-empty string"


class InvalidRunFieldError(WorkflowError):
    code = "run.invalid-field"
    template = "Workflow run {field} must be {expected}"

    def __init__(self, field: str, expected: str) -> None:
        super().__init__(field=field, expected=expected)


class RunAlreadyExistsError(WorkflowError):
    code = "run.already-exists"
    template = "Workflow run already exists: {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)


class ParentRunMissingError(WorkflowError):
    code = "run.parent-missing"
    template = "Workflow parent run is missing: {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)
        self.run_id = run_id


class RunNotFoundError(WorkflowError):
    code = "run.not-found"
    template = "Workflow run not found: {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)
        self.run_id = run_id
        """The run asked for (a pruned one's is ``RunArchivedError`` at the door)."""


class RunMissingError(RunNotFoundError):
    """Upstream's message for a command on a run that does not exist; one not-found contract
    (DESIGN decision 29): the same code, and ``except RunNotFoundError`` catches both."""

    code = "run.not-found"
    template = "Workflow run is missing: {run_id}"


class RunNotAcceptingChangesError(WorkflowError):
    code = "run.not-accepting-changes"
    template = "Workflow run {run_id} does not accept changes with status {status}"

    def __init__(self, run_id: object, status: object) -> None:
        super().__init__(run_id=run_id, status=status)


class RunAlreadyEndedError(WorkflowError):
    code = "run.already-ended"
    template = "Workflow run {run_id} already ended with status {status}"

    def __init__(self, run_id: object, status: object) -> None:
        super().__init__(run_id=run_id, status=status)


class InvalidRunStatusError(WorkflowError):
    code = "run.invalid-status"
    template = "Workflow run status {status} is not one of: {allowed}"

    def __init__(self, status: object, allowed: str) -> None:
        super().__init__(status=status, allowed=allowed)


class InvalidSessionIdError(WorkflowError):
    code = "run.invalid-session-id"
    template = "Workflow Pi session ID must be a non-empty string"


class InvalidExecutionModeError(WorkflowError):
    code = "run.invalid-execution-mode"
    template = "Workflow execution mode must be interactive or headless"


class EmptyPresentationInstructionsError(WorkflowError):
    code = "run.presentation-instructions-empty"
    template = "Presentation instructions must not be empty"


class PresentationInstructionsChangedError(WorkflowError):
    code = "run.presentation-instructions-changed"
    template = "Workflow presentation instructions changed within one run"


class RunHasNoOriginSessionError(WorkflowError):
    code = "run.no-origin-session"
    template = "Workflow run {run_id} has no origin Pi session"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)


class ConcurrencyError(WorkflowError):
    code = "store.kept-conflicting"
    template = "Workflow state kept changing under concurrent commands; retry the request"
    retryable = True


# -- restarts -----------------------------------------------------------------------------


class RunOfAnotherSessionError(WorkflowError):
    code = "run.other-session"
    template = "Workflow run belongs to another Pi session"


class CancelledRunRestartError(WorkflowError):
    code = "restart.cancelled-source"
    template = "An explicitly cancelled workflow cannot be restarted"


class RestartLimitError(WorkflowError):
    code = "restart.limit-reached"
    template = "Workflow restart limit reached ({limit} restarts)"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class StaleTerminalResultError(WorkflowError):
    code = "restart.stale-terminal-result"
    template = "Workflow terminal result is stale or was replaced"


class RestartRequiresTurnError(WorkflowError):
    code = "restart.turn-required"
    template = "Workflow restart requires a terminal model turn"


class StaleTerminalTurnError(WorkflowError):
    code = "restart.stale-turn"
    template = "Workflow terminal turn is stale"


class RepeatedTerminalOutcomeError(WorkflowError):
    code = "restart.repeated-outcome"
    template = "The same terminal outcome already occurred in this restart chain"


# -- follow-ups ---------------------------------------------------------------------------


class EmptyPromptError(WorkflowError):
    code = "follow-up.empty-prompt"
    template = "Workflow follow-up prompt must be a non-empty string"


class PromptTooLargeError(WorkflowError):
    code = "follow-up.prompt-too-large"
    template = "Workflow follow-up prompt cannot exceed {limit} bytes"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class FollowUpRequestReusedError(WorkflowError):
    code = "follow-up.request-reused"
    template = "Workflow follow-up request ID was reused with different content"


class NotOriginSessionError(WorkflowError):
    code = "follow-up.not-origin-session"
    template = "Workflow follow-ups must target the run's origin Pi session"


class FollowUpNotFoundError(WorkflowError):
    code = "follow-up.not-found"
    template = "Workflow follow-up not found: {follow_up_id}"

    def __init__(self, follow_up_id: object) -> None:
        super().__init__(follow_up_id=follow_up_id)


class FollowUpNotInRunError(WorkflowError):
    code = "follow-up.wrong-run"
    template = "Workflow follow-up is not part of run {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)


class CancelledFollowUpRemovalError(WorkflowError):
    code = "follow-up.cancelled"
    template = "A cancelled workflow follow-up cannot be removed"


class FollowUpRemovalNotAllowedError(WorkflowError):
    code = "follow-up.removal-not-allowed"
    template = "Workflow follow-up can be removed only by its source or a verified human"


class SentFollowUpRemovalError(WorkflowError):
    code = "follow-up.sent"
    template = "A sent workflow follow-up cannot be removed"


# -- workflow messages and turns ----------------------------------------------------------


class InvalidMessageContentError(WorkflowError):
    code = "workflow-message.invalid-content"
    template = "Workflow message content is invalid"


class InvalidTurnBehaviourError(WorkflowError):
    code = "workflow-message.invalid-turn-behavior"
    template = "Workflow message kind {kind} has invalid turn behavior"

    def __init__(self, kind: str) -> None:
        super().__init__(kind=kind)


class InvalidMessageKindError(WorkflowError):
    code = "workflow-message.invalid-kind"
    template = "Workflow message kind {kind} cannot be created directly; use one of: {allowed}"

    def __init__(self, kind: object, allowed: str) -> None:
        super().__init__(kind=kind, allowed=allowed)


class InvalidMessageIdentityError(WorkflowError):
    code = "workflow-message.invalid-identity"
    template = "Workflow message {field} must be a non-empty string"

    def __init__(self, field: str) -> None:
        super().__init__(field=field)


class MessageIdempotencyConflictError(WorkflowError):
    code = "workflow-message.idempotency-conflict"
    template = "Workflow message idempotency conflict: {workflow_message_id}"

    def __init__(self, workflow_message_id: object) -> None:
        super().__init__(workflow_message_id=workflow_message_id)


class MessageNotFoundError(WorkflowError):
    code = "workflow-message.not-found"
    template = "Workflow message not found: {workflow_message_id}"

    def __init__(self, workflow_message_id: object) -> None:
        super().__init__(workflow_message_id=workflow_message_id)


class UnknownBranchMessageError(WorkflowError):
    code = "branch.unknown-message"
    template = "Workflow branch report contains an unknown message: {workflow_message_id}"

    def __init__(self, workflow_message_id: object) -> None:
        super().__init__(workflow_message_id=workflow_message_id)


class BranchWrongSessionError(WorkflowError):
    code = "branch.wrong-session"
    template = "Workflow branch report targets the wrong origin session"


class ConflictingEntryEvidenceError(WorkflowError):
    code = "branch.conflicting-evidence"
    template = "Workflow message has conflicting Pi session entry evidence"


class InvalidBranchEntryError(WorkflowError):
    code = "branch.invalid-entry"
    template = (
        "Workflow branch entries must be pairs of a workflow message ID and a Pi session entry ID"
    )


class TurnIdentityConflictError(WorkflowError):
    code = "workflow-turn.identity-conflict"
    template = "Workflow turn identity conflict: {workflow_turn_id}"

    def __init__(self, workflow_turn_id: object) -> None:
        super().__init__(workflow_turn_id=workflow_turn_id)


class TurnMessageMismatchError(WorkflowError):
    code = "workflow-turn.message-mismatch"
    template = "Workflow turn does not match its message"


class TurnRequiresSentMessageError(WorkflowError):
    code = "workflow-turn.message-not-sent"
    template = "Workflow turn requires a sent message"


class TurnEndConflictError(WorkflowError):
    code = "workflow-turn.end-conflict"
    template = "Workflow turn end report conflicts with its saved result"


class TurnNotFoundError(WorkflowError):
    code = "workflow-turn.not-found"
    template = "Workflow turn not found: {workflow_turn_id}"

    def __init__(self, workflow_turn_id: object) -> None:
        super().__init__(workflow_turn_id=workflow_turn_id)


class OpenTurnExistsError(WorkflowError):
    code = "workflow-turn.already-open"
    template = "Workflow message {workflow_message_id} already has an open turn: {workflow_turn_id}"

    def __init__(self, workflow_message_id: object, workflow_turn_id: object) -> None:
        super().__init__(workflow_message_id=workflow_message_id, workflow_turn_id=workflow_turn_id)


class InvalidResponseEntryError(WorkflowError):
    code = "workflow-turn.invalid-response-entry"
    template = "Workflow turn response session entry ID must be a string or None"


class InvalidTurnIdError(WorkflowError):
    code = "workflow-turn.invalid-id"
    template = "Workflow turn ID must be a non-empty string"


class InvalidStopReasonError(WorkflowError):
    code = "workflow-turn.invalid-stop-reason"
    template = "Workflow turn stop reason must be one of: completed, aborted, error, lost"


# -- storage ------------------------------------------------------------------------------


class StorageUnavailableError(WorkflowError):
    """The database could not serve the call now; the same call may succeed once it can."""

    code = "store.unavailable"
    template = "Storage at {endpoint} is unavailable: {cause}{detail}"
    retryable = True

    def __init__(self, cause: str, endpoint: str, detail: str = "") -> None:
        super().__init__(cause=cause, endpoint=endpoint, detail=f" ({detail})" if detail else "")
        self.cause = cause
        self.endpoint = endpoint


class StoreClosedError(WorkflowError):
    code = "store.closed"
    template = "The store is closed"


class InvalidStoreParameterError(WorkflowError):
    code = "store.invalid-parameter"
    template = "Store URL parameter {parameter}: {problem}"

    def __init__(self, parameter: str, problem: str) -> None:
        super().__init__(parameter=parameter, problem=problem)


MAX_SHOWN_TOKEN_CHARACTERS: Final = 64


class InvalidPositionTokenError(WorkflowError):
    """``reading_after`` got something ``position_token`` did not return."""

    code = "store.invalid-position-token"
    template = "Position token {token}: {problem}"

    def __init__(self, token: object, problem: str) -> None:
        # A token is a few dozen characters: a longer text is quoted by its start only.
        if isinstance(token, str) and len(token) > MAX_SHOWN_TOKEN_CHARACTERS:
            token = token[:MAX_SHOWN_TOKEN_CHARACTERS] + "…"
        super().__init__(token=token, problem=problem)


class StoreNotFoundError(WorkflowError):
    """A command that only reads was pointed at a store that does not exist (it makes none)."""

    code = "store.not-found"
    template = "No runledger store at {url}: {reason}"

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url=url, reason=reason)


class InvalidStorePathError(WorkflowError):
    code = "store.invalid-path"
    template = "SQLite store {url} cannot be opened: {reason}"

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url=url, reason=reason)


class InvalidStoreLocationError(WorkflowError):
    code = "store.invalid-location"
    template = (
        "A store location is a URL (sqlite:///path, postgresql://…, memory://) or a file path, "
        "not {kind}"
    )

    def __init__(self, kind: str) -> None:
        super().__init__(kind=kind)


# -- settings scopes (upstream §9.1-9.2) ---------------------------------------------------


class InvalidSettingsInvocationError(WorkflowError):
    code = "settings.invalid-invocation"
    template = "Workflow settings invocation must be a positive integer"


class InvalidSettingsMountPathError(WorkflowError):
    code = "settings.invalid-mount-path"
    template = "Workflow settings mount path must be a string"


class ContinuationChainTooDeepError(WorkflowError):
    code = "settings.chain-too-deep"
    template = "Workflow continuation chain is too deep for run {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)


class SettingsScopeOfAnotherRunError(WorkflowError):
    code = "settings.scope-of-another-run"
    template = "Workflow settings scope belongs to another active run: {scope_id}"

    def __init__(self, scope_id: object) -> None:
        super().__init__(scope_id=scope_id)


class InvalidSettingsPolicyError(WorkflowError):
    code = "settings.invalid-policy"
    template = "Workflow settings policy is invalid: {problem}"

    def __init__(self, problem: str) -> None:
        super().__init__(problem=problem)


class InvalidSettingsPatchError(WorkflowError):
    code = "settings.invalid-patch"
    template = "Workflow settings patch is invalid: {problem}"

    def __init__(self, problem: str) -> None:
        super().__init__(problem=problem)


class SettingsRequestReusedError(WorkflowError):
    code = "settings.request-reused"
    template = "Workflow settings request ID was reused with different content"


class SettingsScopeNotFoundError(WorkflowError):
    code = "settings.scope-not-found"
    template = "Workflow settings scope not found: {scope_id}"

    def __init__(self, scope_id: object) -> None:
        super().__init__(scope_id=scope_id)


class SettingsScopeNotActiveError(WorkflowError):
    code = "settings.scope-not-active"
    template = "Workflow settings scope is not active for run {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)


class StaleSettingsError(WorkflowError):
    code = "settings.stale"
    template = "Workflow settings changed: expected {expected}, current {current}"

    def __init__(self, expected: int, current: int) -> None:
        super().__init__(expected=expected, current=current)


class SettingsPermissionError(WorkflowError):
    code = "settings.not-allowed"
    template = "Workflow settings {permission} is not allowed at {path} for actor {actor_type}"

    def __init__(self, permission: str, path: str, actor_type: str) -> None:
        # Upstream quotes the path with JSON.stringify.
        super().__init__(permission=permission, path=json_string(path), actor_type=actor_type)


class SettingsTooLargeError(WorkflowError):
    code = "settings.too-large"
    template = "Workflow settings cannot exceed {limit} bytes"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class SettingsKeptChangingError(WorkflowError):
    code = "settings.kept-changing"
    template = "Workflow settings kept changing; retry with an expected number"


class InvalidSettingsChangeNumberError(WorkflowError):
    code = "settings.invalid-change-number"
    template = "Workflow settings change number must be a non-negative integer"


class SettingsChangeMissingError(WorkflowError):
    code = "settings.change-missing"
    template = "Workflow settings change {change_number} does not exist for {scope_id}"

    def __init__(self, change_number: object, scope_id: object) -> None:
        super().__init__(change_number=change_number, scope_id=scope_id)


# -- progress updates (upstream §3.9 publishUpdate) -----------------------------------------


class TooManyUpdatesError(WorkflowError):
    code = "update.too-many"
    template = "workflow run supports at most {limit} current updates"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class InvalidUpdateFieldError(WorkflowError):
    code = "update.invalid-field"
    template = "Workflow update {field} must be {expected}"

    def __init__(self, field: str, expected: str) -> None:
        super().__init__(field=field, expected=expected)


# -- reads --------------------------------------------------------------------------------


class InvalidViewerCursorError(WorkflowError):
    code = "viewer.invalid-cursor"
    template = "Viewer cursor must be a non-negative integer"


# Faults of the viewer projection's own state, never of a caller's input, so not
# WorkflowErrors: a projection stalls on them and the CLI reports them as internal faults.


class ViewerPageTotalError(ValueError):
    """A tail patch was asked for with an old total that is not a non-negative integer."""

    def __init__(self) -> None:
        super().__init__("Viewer page total must be a non-negative integer")


class ViewerProjectionMissingError(LookupError):
    """An event names a run whose ``run.created`` this projection never saw."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"Viewer projection does not exist for workflow run: {run_id}")


class InvalidPageError(WorkflowError):
    code = "query.invalid-page"
    template = "Workflow {name} must be a non-negative integer"

    def __init__(self, name: str) -> None:
        super().__init__(name=name)


class UnknownProjectionError(WorkflowError):
    code = "projection.unknown"
    template = "Unknown projection: {name}; known projections: {known}"

    def __init__(self, name: str, known: str) -> None:
        super().__init__(name=name, known=known)


class InvalidProgressError(WorkflowError):
    code = "projection.invalid-progress"
    template = "Projection progress must be a callable taking a count, or None"


class ProjectionStalledError(WorkflowError):
    code = "projection.stalled"
    template = "Projection {name} stopped {failure}; fix the cause and rebuild it"

    def __init__(self, name: str, failure: object) -> None:
        super().__init__(name=name, failure=failure)


class ReadModelsBehindError(WorkflowError):
    """A query's catch-up failed: answering from the views as they are could miss this
    process's own commits, so the query is not answered."""

    code = "projection.behind"
    template = "Read models could not catch up with the event log: {cause}"
    retryable = True

    def __init__(self, error: BaseException) -> None:
        # The first line of the cause only: a database's message, never connection settings.
        line = (str(error).strip().splitlines() or [""])[0]
        super().__init__(cause=f"{type(error).__name__}: {line[:300]}")


class UnknownStoredEventError(WorkflowError):
    code = "store.unknown-event"
    template = "Stored event topic {topic!r} is not in the runledger event catalogue"

    def __init__(self, topic: str) -> None:
        super().__init__(topic=topic)


class CorruptEventError(WorkflowError):
    """A stored event or snapshot that does not decode: repair the store, retrying cannot help.

    ``position`` is the event's log position where the read path knows it (log reads,
    projections, rebuilds); an aggregate load names the aggregate id and version, which
    identify the row as exactly. ``wire_name`` is None when the history as a whole is wrong
    (it replays to another kind of aggregate than its id was made for).
    """

    code = "store.corrupt-event"
    template = "{where} is corrupt: {reason}; repair the store"

    def __init__(
        self,
        reason: str,
        *,
        wire_name: str | None,
        aggregate_id: object,
        version: object,
        position: int | None = None,
    ) -> None:
        # Stored text is untrusted: shown through repr (escapes surrogates), never at length.
        aggregate = f"aggregate {clipped_repr(aggregate_id)}"
        if wire_name is None:
            where = f"Stored history of {aggregate} up to version {version!r}"
        elif position is None:
            where = f"Stored event {clipped_repr(wire_name)} of {aggregate} version {version!r}"
        else:
            where = (
                f"Stored event at position {position} "
                f"({clipped_repr(wire_name)} of {aggregate} version {version!r})"
            )
        super().__init__(where=where, reason=reason)
        self.reason = reason
        self.wire_name = wire_name
        self.aggregate_id = aggregate_id
        self.version = version
        self.position = position


def clipped_repr(value: object, limit: int = 80) -> str:
    """Untrusted stored text as it may be shown: repr (surrogates escaped), at most ``limit``."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RebuildFailedError(WorkflowError):
    code = "projection.rebuild-failed"
    template = "Rebuilding the projections failed: {reasons}"

    def __init__(self, reasons: str, *, corrupt: bool = False) -> None:
        super().__init__(reasons=reasons)
        self.corrupt = corrupt
        """Whether a rebuild process met a corrupt stored event (what a verification finds)."""


class ProjectionBuildLockedError(WorkflowError):
    code = "projection.build-locked"
    template = (
        "Projection {name} is being rebuilt by {holder}; "
        "only one build of a projection runs at a time"
    )

    def __init__(self, name: str, holder: str) -> None:
        super().__init__(name=name, holder=holder)

    retryable = True


class ProjectionVersionError(WorkflowError):
    code = "projection.other-version"
    template = (
        "Projection {name} is at version {stored_version} in the store, "
        "this code reads version {code_version}: "
        "run `runledger projections rebuild {name}` with the code of the version wanted"
    )

    def __init__(self, name: str, stored_version: int | None, code_version: int) -> None:
        super().__init__(name=name, stored_version=stored_version, code_version=code_version)


class InvalidAsOfError(WorkflowError):
    code = "query.invalid-as-of"
    template = "Read-model position as_of must be a non-negative integer or None"


class AsOfBeyondLogError(WorkflowError):
    code = "query.as-of-beyond-log"
    template = "Log position as_of {as_of} is beyond the end of the log ({head})"

    def __init__(self, as_of: int, head: int) -> None:
        super().__init__(as_of=as_of, head=head)


class UnknownRunCursorError(WorkflowError):
    code = "query.unknown-run-cursor"
    template = "Workflow runs page cursor names an unknown run: {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)


class InvalidStoreUrlError(WorkflowError):
    code = "store.invalid-url"
    template = "Unsupported store URL {url!r}: use sqlite:///path, postgresql://… or memory://"

    def __init__(self, url: str) -> None:
        super().__init__(url=url)


class UnsupportedBenchUrlError(WorkflowError):
    """The bench makes scratch databases beside the URL's, for processes to share: a memory
    store has none."""

    code = "bench.unsupported-url"
    template = (
        "runledger bench measures SQLite and PostgreSQL, not {url!r}: "
        "use sqlite:///path or postgresql://…"
    )

    def __init__(self, url: str) -> None:
        super().__init__(url=url)


# -- human decisions ----------------------------------------------------------------------


class DecisionRunMissingError(WorkflowError):
    code = "decision.run-missing"
    template = "Human decision run is missing: {run_id}"

    def __init__(self, run_id: object) -> None:
        super().__init__(run_id=run_id)
        self.run_id = run_id


class DecisionNotFoundError(WorkflowError):
    code = "decision.not-found"
    template = "Human decision not found: {decision_id}"

    def __init__(self, decision_id: object) -> None:
        super().__init__(decision_id=decision_id)


class InvalidDecisionFieldError(WorkflowError):
    code = "decision.invalid-field"
    template = "Human decision {field} must be a non-empty string of at most {limit} characters"

    def __init__(self, field: str, limit: int) -> None:
        super().__init__(field=field, limit=limit)


class InvalidDecisionFlagError(WorkflowError):
    code = "decision.invalid-flag"
    template = "Human decision option {option} must be True or False"

    def __init__(self, option: str) -> None:
        super().__init__(option=option)


class InvalidDecisionJsonError(WorkflowError):
    code = "decision.invalid-json"
    template = (
        "Human decision {field} must be plain JSON: valid UTF-8 text, at most {depth} levels deep "
        "and {size} bytes"
    )

    def __init__(self, field: str, depth: int, size: int) -> None:
        super().__init__(field=field, depth=depth, size=size)


class InvalidDecisionRequestError(WorkflowError):
    code = "decision.invalid-request"
    template = "Human decision request {problem}"

    def __init__(self, problem: str) -> None:
        super().__init__(problem=problem)


class DecisionRequestConflictError(WorkflowError):
    code = "decision.request-conflict"
    template = "Immutable human decision request conflicts"


class InvalidDecisionResponseError(WorkflowError):
    code = "decision.invalid-response"
    template = "Human decision response must be a JSON object"


class DecisionResponseNotAChoiceError(WorkflowError):
    code = "decision.response-not-a-choice"
    template = "Human decision response is not one of the choices"


class DecisionExpiredError(WorkflowError):
    code = "decision.expired"
    template = "Human decision request expired before the answer was accepted"


class DecisionTimeoutNotEligibleError(WorkflowError):
    code = "decision.timeout-not-eligible"
    template = "Human decision timeout default is not eligible yet"


class InvalidCancellationProvenanceError(WorkflowError):
    code = "decision.invalid-cancellation-provenance"
    template = "Human decision cancellation provenance must be one of: {allowed}"

    def __init__(self, allowed: str) -> None:
        super().__init__(allowed=allowed)


class DecisionHasTimeoutDefaultError(WorkflowError):
    code = "decision.has-timeout-default"
    template = (
        "Human decision has a timeout default; apply the timeout policy instead: {decision_id}"
    )

    def __init__(self, decision_id: object) -> None:
        super().__init__(decision_id=decision_id)


class DecisionAlreadyAcceptedError(WorkflowError):
    code = "decision.already-accepted"
    template = "Human decision is already accepted: {decision_id}"

    def __init__(self, decision_id: object) -> None:
        super().__init__(decision_id=decision_id)


class DecisionNotAcceptedError(WorkflowError):
    code = "decision.not-accepted"
    template = "Human decision is not accepted: {decision_id}"

    def __init__(self, decision_id: object) -> None:
        super().__init__(decision_id=decision_id)


class DecisionContinuationConflictError(WorkflowError):
    code = "decision.continuation-conflict"
    template = "Immutable human decision continuation conflicts"


# -- run leases (upstream §3.10, §8.3) ----------------------------------------------------


class LeaseDurationError(WorkflowError):
    code = "lease.invalid-duration"
    template = "Lease duration must be a positive integer"


class LeaseTooLongError(WorkflowError):
    code = "lease.too-long"
    template = "Lease duration must be at most {limit} milliseconds"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class AuthorityLeaseDurationError(WorkflowError):
    code = "lease.invalid-authority-duration"
    template = "Workflow run authority lease duration must be a positive integer"


class InvalidLeaseOwnerError(WorkflowError):
    code = "lease.invalid-owner"
    template = "Lease owner must be a known actor type and a non-empty id"


class InvalidClaimError(WorkflowError):
    code = "lease.invalid-claim"
    template = "Workflow run claim must be a RunClaim returned by claim_run"


class LeaseNotCurrentError(WorkflowError):
    code = "lease.not-current"
    template = "Lease is no longer current"


class LeaseOfAnotherRunError(WorkflowError):
    code = "lease.other-resource"
    template = "Lease does not belong to the mutation resource"


class ClaimLostError(WorkflowError):
    code = "lease.claim-lost"
    template = "Workflow run claim lost ({reason}): {run_id}"

    def __init__(self, reason: str, run_id: str) -> None:
        super().__init__(reason=reason, run_id=run_id)
        self.reason = reason


# -- managed effects (upstream §9.4, decisions 17 and 23) ---------------------------------


class InvalidEffectLabelError(WorkflowError):
    code = "effect.invalid-label"
    template = "Managed effect {label} must be nonempty text of at most {limit} characters"

    def __init__(self, label: str, limit: int) -> None:
        super().__init__(label=label, limit=limit)


class InvalidEffectRequestError(WorkflowError):
    code = "effect.invalid-request"
    template = "Managed effect request must be a JSON object whose recovery is idempotent or manual"


class EffectKeyReusedError(WorkflowError):
    code = "effect.key-reused"
    template = "Managed effect key was reused with another request"


class EffectNotApplyingError(WorkflowError):
    code = "effect.not-applying"
    template = "Managed effect is not applying"


class InvalidEffectOutcomeError(WorkflowError):
    code = "effect.invalid-outcome"
    template = "Managed effect outcome must be applied or failed"


class EffectNotFoundError(WorkflowError):
    code = "effect.not-found"
    template = "Managed effect not found: {effect_id}"

    def __init__(self, effect_id: object) -> None:
        super().__init__(effect_id=effect_id)


class EffectNotRetryableError(WorkflowError):
    code = "effect.not-retryable"
    template = "Managed effect can only be retried when failed or ambiguous, not {status}"

    def __init__(self, status: object) -> None:
        super().__init__(status=status)


# -- session recording (upstream §3.12, decisions 21 and 26) ------------------------------


class SessionBindingMismatchError(WorkflowError):
    code = "session.binding-mismatch"
    template = "Session binding does not match the workflow run"


class InvalidCaptureAttemptError(WorkflowError):
    code = "session.invalid-attempt"
    template = "Session capture attempt id must be a non-empty string or None"


class SessionSegmentMissingError(WorkflowError):
    code = "session.segment-missing"
    template = "Session capture segment is missing: {segment_id}"

    def __init__(self, segment_id: object) -> None:
        super().__init__(segment_id=segment_id)


class InvalidSessionEntryError(WorkflowError):
    code = "session.invalid-entry"
    template = "Session entry must be a JSON object"


class InvalidSessionEventBatchError(WorkflowError):
    code = "session.invalid-batch"
    template = "Session events must be a list of event records"


class SessionCaptureStoppedError(WorkflowError):
    code = "session.capture-stopped"
    template = "Session event capture has stopped"


class UnexpectedSessionEventSeqError(WorkflowError):
    code = "session.unexpected-seq"
    template = "Expected session event seq {expected}, got {got}"

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(expected=expected, got=got)


class InvalidSessionEventSeqError(WorkflowError):
    code = "session.invalid-seq"
    template = "Session event seq must be a positive safe integer"


class SessionEventEnvelopeError(WorkflowError):
    code = "session.missing-envelope"
    template = "Session event is missing required envelope fields"


class IncrementalSessionEventError(WorkflowError):
    code = "session.incremental-event"
    template = "Incremental assistant events are not durable session facts"


class SessionEventTooLargeError(WorkflowError):
    code = "session.event-too-large"
    template = "session event exceeded {limit} bytes"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class SessionEventBatchTooLargeError(WorkflowError):
    code = "session.batch-too-large"
    template = "Workflow session event batch exceeded {limit} bytes of records"

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)


class InvalidSessionCaptureError(WorkflowError):
    code = "session.invalid-capture"
    template = "Invalid session capture projection"


class CaptureFailureRequiredError(WorkflowError):
    code = "session.failure-required"
    template = "Failed session capture requires failure details"


class CaptureFailureForbiddenError(WorkflowError):
    code = "session.failure-forbidden"
    template = "Only failed session capture may contain failure details"


# -- audit ------------------------------------------------------------------------------------


class InvalidAuditArgumentError(WorkflowError):
    code = "audit.invalid-argument"
    template = "Audit {name} must be {expected}"

    def __init__(self, name: str, expected: str) -> None:
        super().__init__(name=name, expected=expected)


class BundleWriteError(WorkflowError):
    code = "audit.bundle-not-written"
    template = "Audit bundle cannot be written to {path}: {reason}"

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(path=path, reason=reason)


class BundleReadError(WorkflowError):
    code = "audit.bundle-unreadable"
    template = "Audit bundle cannot be read from {path}: {reason}"

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(path=path, reason=reason)


# -- optional extras ----------------------------------------------------------------------


class OptionalExtraMissingError(WorkflowError):
    code = "cli.extra-missing"
    template = "{feature} needs the {extra} extra: pip install 'runledger[{extra}]' ({module})"

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(feature=feature, extra=extra, module=module)


class InvalidLogFormatError(WorkflowError):
    code = "cli.invalid-log-format"
    template = "Unknown log format {log_format!r}: use one of {allowed}"

    def __init__(self, log_format: object, allowed: str) -> None:
        super().__init__(log_format=log_format, allowed=allowed)


# -- retention ----------------------------------------------------------------------------


class ArchiveNotVerifiedError(WorkflowError):
    """The bundle written for a run tree did not read back intact: nothing may be pruned."""

    code = "retention.bundle-not-verified"
    template = "Archive bundle {path} of run tree {root_run_id} did not verify: {reason}"

    def __init__(self, path: object, root_run_id: object, reason: str) -> None:
        super().__init__(path=path, root_run_id=root_run_id, reason=reason)


class InvalidCutoffError(WorkflowError):
    code = "retention.invalid-cutoff"
    template = "Retention cutoff must be a datetime with a time zone, got {value}"

    def __init__(self, value: object) -> None:
        super().__init__(value=value)


class InvalidCutoffTextError(WorkflowError):
    """``runledger prune --settled-before`` given something that is no cutoff."""

    code = "retention.invalid-cutoff"
    template = (
        "--settled-before must be a number of days (e.g. 30d) or an ISO date or datetime "
        "(UTC unless it names a zone), got {value}"
    )

    def __init__(self, value: object) -> None:
        super().__init__(value=value)


class InvalidArchiveFolderError(WorkflowError):
    code = "retention.invalid-archive"
    template = "Archive folder must be an existing directory: {path}"

    def __init__(self, path: object) -> None:
        super().__init__(path=path)


class RunArchivedError(RunNotFoundError):
    """A run whose tree was pruned: known, but its history lives in a bundle now. A subclass
    of not-found, so a host that only handles a missing run still stops there."""

    code = "run.archived"
    template = (
        "Workflow run {run_id} was archived at {archived_at} to a bundle with SHA-256 "
        "{bundle_sha256}"
    )

    def __init__(
        self, run_id: object, archived_at: str, bundle_sha256: str, bundle: str | None = None
    ) -> None:
        WorkflowError.__init__(
            self, run_id=run_id, archived_at=archived_at, bundle_sha256=bundle_sha256
        )
        self.run_id = run_id
        self.archived_at = archived_at
        self.bundle_sha256 = bundle_sha256
        self.bundle = bundle
        """Where the prune wrote the bundle (the tombstone records it; it may have moved)."""


class RestoreRefusedError(WorkflowError):
    """A bundle that cannot put its tree back: it does not verify, no tombstone names it, it
    does not match its tombstone, or the tree is in the store. Nothing was written."""

    code = "retention.restore-refused"
    template = "Cannot restore from {bundle}: {reason}"

    def __init__(self, bundle: object, reason: str) -> None:
        super().__init__(bundle=bundle, reason=reason)


class RestoreNotVerifiedError(WorkflowError):
    """The restored tree's rows do not re-project to its bundle's digests: the events are
    back, but the read models differ from what the bundle promised (``projections verify``)."""

    code = "retention.restore-not-verified"
    template = "Run tree {root_run_id} was restored from {bundle}, but {reason}"

    def __init__(self, root_run_id: object, bundle: object, reason: str) -> None:
        super().__init__(root_run_id=root_run_id, bundle=bundle, reason=reason)


class CompactUnsupportedError(WorkflowError):
    code = "compact.unsupported-url"
    template = "runledger compact works on a SQLite or PostgreSQL store, not {url}"

    def __init__(self, url: str) -> None:
        super().__init__(url=url)
