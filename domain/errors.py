"""Every failure a command or query can report, each with a stable kebab ``code``.

Messages are the exact upstream (pi-workflows 0.16.2) strings where upstream has one; each
text lives only here, in its class's ``template``.
"""

from __future__ import annotations

import reprlib
from typing import Any, ClassVar, Final

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
        cut = value if len(value) <= MAX_SHOWN_CHARACTERS else value[:MAX_SHOWN_CHARACTERS] + "…"
        return cut.encode("utf-8", "backslashreplace").decode("utf-8")
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        message = self.template.format(
            *map(shown, args), **{key: shown(value) for key, value in kwargs.items()}
        )
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# -- text rules ---------------------------------------------------------------------------


class InvalidRequestIdError(WorkflowError):
    code = "request.invalid-id"
    template = "Workflow request ID must be a stable identifier of at most 512 characters"


class InvalidSourceError(WorkflowError):
    code = "request.invalid-source"
    template = "Workflow change source must be a non-empty string of at most 128 characters"


class UnknownActorTypeError(WorkflowError):
    code = "actor.unknown-type"
    template = "Unknown saved actor type: {actor_type}{known}"

    def __init__(self, actor_type: object, known: tuple[str, ...] = ()) -> None:
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


class InvalidCallError(WorkflowError):
    code = "argument.invalid-call"
    template = "{problem}; WorkflowStore.{command} takes {signature}"


class InvalidTextError(WorkflowError):
    code = "text.invalid"
    template = "Workflow argument {} must be Unicode text without lone surrogates or NUL characters"


class ValueTooDeepError(WorkflowError):
    code = "json.too-deep"
    template = "Workflow argument {} is nested more than {} levels deep"


class ValueTooLargeError(WorkflowError):
    code = "json.too-large"
    template = "Workflow argument {} holds more than {} values or {} bytes of text"


class KeyTooLongError(WorkflowError):
    code = "text.key-too-long"
    template = "Workflow argument {} is longer than {} bytes of UTF-8"


# -- runs ---------------------------------------------------------------------------------


class InvalidRunIdError(WorkflowError):
    code = "run.invalid-id"
    template = "Invalid workflow run id: {}"

    def __init__(self, run_id: object) -> None:
        # Upstream quotes the id with JSON.stringify: non-ASCII stays as it is.
        super().__init__(json_string(run_id if isinstance(run_id, str) else str(shown(run_id))))


class InvalidWorkflowNameError(WorkflowError):
    code = "run.invalid-workflow-name"
    template = "Workflow name must be a non-empty string"


class InvalidRunFieldError(WorkflowError):
    code = "run.invalid-field"
    template = "Workflow run {} must be {}"


class RunAlreadyExistsError(WorkflowError):
    code = "run.already-exists"
    template = "Workflow run already exists: {}"


class ParentRunMissingError(WorkflowError):
    code = "run.parent-missing"
    template = "Workflow parent run is missing: {}"


class RunNotFoundError(WorkflowError):
    code = "run.not-found"
    template = "Workflow run not found: {}"


class RunMissingError(RunNotFoundError):
    """Upstream's message for a command on a run that does not exist; one not-found contract
    (DESIGN decision 29): the same code, and ``except RunNotFoundError`` catches both."""

    code = "run.not-found"
    template = "Workflow run is missing: {}"


class RunNotAcceptingChangesError(WorkflowError):
    code = "run.not-accepting-changes"
    template = "Workflow run {} does not accept changes with status {}"


class RunAlreadyEndedError(WorkflowError):
    code = "run.already-ended"
    template = "Workflow run {} already ended with status {}"


class InvalidRunStatusError(WorkflowError):
    code = "run.invalid-status"
    template = "Workflow run status {} is not one of: {}"


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
    template = "Workflow run {} has no origin Pi session"


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
    template = "Workflow restart limit reached (3 restarts)"


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
    template = "Workflow follow-up prompt cannot exceed 65536 bytes"


class FollowUpRequestReusedError(WorkflowError):
    code = "follow-up.request-reused"
    template = "Workflow follow-up request ID was reused with different content"


class NotOriginSessionError(WorkflowError):
    code = "follow-up.not-origin-session"
    template = "Workflow follow-ups must target the run's origin Pi session"


class FollowUpNotFoundError(WorkflowError):
    code = "follow-up.not-found"
    template = "Workflow follow-up not found: {}"


class FollowUpNotInRunError(WorkflowError):
    code = "follow-up.wrong-run"
    template = "Workflow follow-up is not part of run {}"


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
    template = "Workflow message kind {} has invalid turn behavior"


class InvalidMessageKindError(WorkflowError):
    code = "workflow-message.invalid-kind"
    template = "Workflow message kind {} cannot be created directly; use one of: {}"


class InvalidMessageIdentityError(WorkflowError):
    code = "workflow-message.invalid-identity"
    template = "Workflow message {} must be a non-empty string"


class MessageIdempotencyConflictError(WorkflowError):
    code = "workflow-message.idempotency-conflict"
    template = "Workflow message idempotency conflict: {}"


class MessageNotFoundError(WorkflowError):
    code = "workflow-message.not-found"
    template = "Workflow message not found: {}"


class UnknownBranchMessageError(WorkflowError):
    code = "branch.unknown-message"
    template = "Workflow branch report contains an unknown message: {}"


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
    template = "Workflow turn identity conflict: {}"


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
    template = "Workflow turn not found: {}"


class OpenTurnExistsError(WorkflowError):
    code = "workflow-turn.already-open"
    template = "Workflow message {} already has an open turn: {}"


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
    template = "Store URL parameter {}: {}"


class StoreNotFoundError(WorkflowError):
    """A command that only reads was pointed at a store that does not exist (it makes none)."""

    code = "store.not-found"
    template = "No runledger store at {url}: {reason}"


class InvalidStorePathError(WorkflowError):
    code = "store.invalid-path"
    template = "SQLite store {url} cannot be opened: {reason}"


class InvalidStoreLocationError(WorkflowError):
    code = "store.invalid-location"
    template = (
        "A store location is a URL (sqlite:///path, postgresql://…, memory://) or a file path, "
        "not {kind}"
    )


# -- settings scopes (upstream §9.1-9.2) ---------------------------------------------------


class InvalidSettingsInvocationError(WorkflowError):
    code = "settings.invalid-invocation"
    template = "Workflow settings invocation must be a positive integer"


class InvalidSettingsMountPathError(WorkflowError):
    code = "settings.invalid-mount-path"
    template = "Workflow settings mount path must be a string"


class ContinuationChainTooDeepError(WorkflowError):
    code = "settings.chain-too-deep"
    template = "Workflow continuation chain is too deep for run {}"


class SettingsScopeOfAnotherRunError(WorkflowError):
    code = "settings.scope-of-another-run"
    template = "Workflow settings scope belongs to another active run: {}"


class InvalidSettingsPolicyError(WorkflowError):
    code = "settings.invalid-policy"
    template = "Workflow settings policy is invalid: {}"


class InvalidSettingsPatchError(WorkflowError):
    code = "settings.invalid-patch"
    template = "Workflow settings patch is invalid: {}"


class SettingsRequestReusedError(WorkflowError):
    code = "settings.request-reused"
    template = "Workflow settings request ID was reused with different content"


class SettingsScopeNotFoundError(WorkflowError):
    code = "settings.scope-not-found"
    template = "Workflow settings scope not found: {}"


class SettingsScopeNotActiveError(WorkflowError):
    code = "settings.scope-not-active"
    template = "Workflow settings scope is not active for run {}"


class StaleSettingsError(WorkflowError):
    code = "settings.stale"
    template = "Workflow settings changed: expected {}, current {}"


class SettingsPermissionError(WorkflowError):
    code = "settings.not-allowed"
    template = "Workflow settings {} is not allowed at {} for actor {}"

    def __init__(self, permission: str, path: str, actor_type: str) -> None:
        # Upstream quotes the path with JSON.stringify.
        super().__init__(permission, json_string(path), actor_type)


class SettingsTooLargeError(WorkflowError):
    code = "settings.too-large"
    template = "Workflow settings cannot exceed {} bytes"


class SettingsKeptChangingError(WorkflowError):
    code = "settings.kept-changing"
    template = "Workflow settings kept changing; retry with an expected number"


class InvalidSettingsChangeNumberError(WorkflowError):
    code = "settings.invalid-change-number"
    template = "Workflow settings change number must be a non-negative integer"


class SettingsChangeMissingError(WorkflowError):
    code = "settings.change-missing"
    template = "Workflow settings change {} does not exist for {}"


# -- progress updates (upstream §3.9 publishUpdate) -----------------------------------------


class TooManyUpdatesError(WorkflowError):
    code = "update.too-many"
    template = "workflow run supports at most {} current updates"


class InvalidUpdateFieldError(WorkflowError):
    code = "update.invalid-field"
    template = "Workflow update {} must be {}"


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
    template = "Workflow {} must be a non-negative integer"


class UnknownProjectionError(WorkflowError):
    code = "projection.unknown"
    template = "Unknown projection: {}; known projections: {}"


class InvalidProgressError(WorkflowError):
    code = "projection.invalid-progress"
    template = "Projection progress must be a callable taking a count, or None"


class ProjectionStalledError(WorkflowError):
    code = "projection.stalled"
    template = "Projection {} stopped {}; fix the cause and rebuild it"


class ReadModelsBehindError(WorkflowError):
    """A query's catch-up failed: answering from the views as they are could miss this
    process's own commits, so the query is not answered."""

    code = "projection.behind"
    template = "Read models could not catch up with the event log: {}"
    retryable = True

    def __init__(self, error: BaseException) -> None:
        # The first line of the cause only: a database's message, never connection settings.
        line = (str(error).strip().splitlines() or [""])[0]
        super().__init__(f"{type(error).__name__}: {line[:300]}")


class UnknownStoredEventError(WorkflowError):
    code = "store.unknown-event"
    template = "Stored event topic {!r} is not in the runledger event catalogue"


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
    template = "Rebuilding the projections failed: {}"

    def __init__(self, reasons: str, *, corrupt: bool = False) -> None:
        super().__init__(reasons)
        self.corrupt = corrupt
        """Whether a rebuild process met a corrupt stored event (what a verification finds)."""


class ProjectionBuildLockedError(WorkflowError):
    code = "projection.build-locked"
    template = "Projection {} is being rebuilt by {}; only one build of a projection runs at a time"
    retryable = True


class ProjectionVersionError(WorkflowError):
    code = "projection.other-version"
    template = (
        "Projection {} is at version {} in the store, this code reads version {}: "
        "run `runledger projections rebuild {}` with the code of the version wanted"
    )


class InvalidAsOfError(WorkflowError):
    code = "query.invalid-as-of"
    template = "Read-model position as_of must be a non-negative integer or None"


class AsOfBeyondLogError(WorkflowError):
    code = "query.as-of-beyond-log"
    template = "Log position as_of {} is beyond the end of the log ({})"


class UnknownRunCursorError(WorkflowError):
    code = "query.unknown-run-cursor"
    template = "Workflow runs page cursor names an unknown run: {}"


class InvalidStoreUrlError(WorkflowError):
    code = "store.invalid-url"
    template = "Unsupported store URL {!r}: use sqlite:///path, postgresql://… or memory://"


# -- human decisions ----------------------------------------------------------------------


class DecisionRunMissingError(WorkflowError):
    code = "decision.run-missing"
    template = "Human decision run is missing: {}"


class DecisionNotFoundError(WorkflowError):
    code = "decision.not-found"
    template = "Human decision not found: {}"


class InvalidDecisionFieldError(WorkflowError):
    code = "decision.invalid-field"
    template = "Human decision {} must be a non-empty string of at most 512 characters"


class InvalidDecisionFlagError(WorkflowError):
    code = "decision.invalid-flag"
    template = "Human decision option {} must be True or False"


class InvalidDecisionJsonError(WorkflowError):
    code = "decision.invalid-json"
    template = (
        "Human decision {} must be plain JSON: valid UTF-8 text, at most 64 levels deep "
        "and 65536 bytes"
    )


class InvalidDecisionRequestError(WorkflowError):
    code = "decision.invalid-request"
    template = "Human decision request {}"


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
    template = "Human decision cancellation provenance must be one of: {}"


class DecisionHasTimeoutDefaultError(WorkflowError):
    code = "decision.has-timeout-default"
    template = "Human decision has a timeout default; apply the timeout policy instead: {}"


class DecisionAlreadyAcceptedError(WorkflowError):
    code = "decision.already-accepted"
    template = "Human decision is already accepted: {}"


class DecisionNotAcceptedError(WorkflowError):
    code = "decision.not-accepted"
    template = "Human decision is not accepted: {}"


class DecisionContinuationConflictError(WorkflowError):
    code = "decision.continuation-conflict"
    template = "Immutable human decision continuation conflicts"


# -- run leases (upstream §3.10, §8.3) ----------------------------------------------------


class LeaseDurationError(WorkflowError):
    code = "lease.invalid-duration"
    template = "Lease duration must be a positive integer"


class LeaseTooLongError(WorkflowError):
    code = "lease.too-long"
    template = "Lease duration must be at most {} milliseconds"


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
    template = "Workflow run claim lost ({}): {}"

    def __init__(self, reason: str, run_id: str) -> None:
        super().__init__(reason, run_id)
        self.reason = reason


# -- managed effects (upstream §9.4, decisions 17 and 23) ---------------------------------


class InvalidEffectLabelError(WorkflowError):
    code = "effect.invalid-label"
    template = "Managed effect {} must be nonempty text of at most 256 characters"


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
    template = "Managed effect not found: {}"


class EffectNotRetryableError(WorkflowError):
    code = "effect.not-retryable"
    template = "Managed effect can only be retried when failed or ambiguous, not {}"


# -- session recording (upstream §3.12, decisions 21 and 26) ------------------------------


class SessionBindingMismatchError(WorkflowError):
    code = "session.binding-mismatch"
    template = "Session binding does not match the workflow run"


class InvalidCaptureAttemptError(WorkflowError):
    code = "session.invalid-attempt"
    template = "Session capture attempt id must be a non-empty string or None"


class SessionSegmentMissingError(WorkflowError):
    code = "session.segment-missing"
    template = "Session capture segment is missing: {}"


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
    template = "Expected session event seq {}, got {}"


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
    template = "session event exceeded {} bytes"


class SessionEventBatchTooLargeError(WorkflowError):
    code = "session.batch-too-large"
    template = "Workflow session event batch exceeded {limit} bytes of records"


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
    template = "Audit {} must be {}"


class BundleWriteError(WorkflowError):
    code = "audit.bundle-not-written"
    template = "Audit bundle cannot be written to {}: {}"


class BundleReadError(WorkflowError):
    code = "audit.bundle-unreadable"
    template = "Audit bundle cannot be read from {}: {}"


# -- optional extras ----------------------------------------------------------------------


class OptionalExtraMissingError(WorkflowError):
    code = "cli.extra-missing"
    template = "{feature} needs the {extra} extra: pip install 'runledger[{extra}]' ({module})"


class InvalidLogFormatError(WorkflowError):
    code = "cli.invalid-log-format"
    template = "Unknown log format {!r}: use one of {}"
