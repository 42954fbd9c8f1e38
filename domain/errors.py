"""Every failure a command or query can report, each with a stable kebab ``code``.

Messages are the exact upstream (pi-workflows 0.16.2) strings where upstream has one; each
text lives only here, in its class's ``template``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from runledger.domain.json_strings import json_string


class WorkflowError(Exception):
    """Root of every error runledger reports on purpose."""

    code: ClassVar[str] = "workflow-error"
    template: ClassVar[str] = "{message}"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        message = self.template.format(*args, **kwargs)
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
    template = "Unknown saved actor type: {}"


class InvalidActorError(WorkflowError):
    code = "actor.invalid"
    template = "Workflow actor must be an Actor with a known type and an optional text id"


class NonFiniteJsonNumberError(WorkflowError):
    code = "json.non-finite-number"
    template = "JSON numbers must be finite"


class JsonIntegerTooLargeError(WorkflowError):
    code = "json.integer-too-large"
    template = "JSON integers must be between -2^63 and 2^64 - 1 to be stored"


class NotPlainJsonError(WorkflowError):
    code = "json.not-plain"
    template = "Only plain objects can be stored as canonical JSON"


# -- runs ---------------------------------------------------------------------------------


class InvalidRunIdError(WorkflowError):
    code = "run.invalid-id"
    template = "Invalid workflow run id: {}"

    def __init__(self, run_id: object) -> None:
        # Upstream quotes the id with JSON.stringify: non-ASCII stays as it is.
        super().__init__(json_string(run_id if isinstance(run_id, str) else str(run_id)))


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


class RunMissingError(WorkflowError):
    code = "run.missing"
    template = "Workflow run is missing: {}"


class RunNotFoundError(WorkflowError):
    code = "run.not-found"
    template = "Workflow run not found: {}"


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


class InvalidPageError(WorkflowError):
    code = "query.invalid-page"
    template = "Workflow {} must be a non-negative integer"


class UnknownProjectionError(WorkflowError):
    code = "projection.unknown"
    template = "Unknown projection: {}; known projections: {}"


class ProjectionStalledError(WorkflowError):
    code = "projection.stalled"
    template = "Projection {} stopped {}; fix the cause and rebuild it"


class UnknownStoredEventError(WorkflowError):
    code = "store.unknown-event"
    template = "Stored event topic {!r} is not in the runledger event catalogue"


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
