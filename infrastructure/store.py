"""The composition root: ``open_store(url)`` gives a ``WorkflowStore`` on one backend."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from runledger.domain.application import Clock, WorkflowRuns, utc_now
from runledger.domain.arguments import SIZED_BY_RULES, check_arguments
from runledger.domain.errors import InvalidCallError, InvalidProgressError
from runledger.domain.records import (
    AuditTrail,
    AuditVerdict,
    ProjectionStatus,
    PruneReport,
    RestoredTree,
)
from runledger.domain.values import looked_up_id
from runledger.infrastructure.audit.bundle import export_bundle
from runledger.infrastructure.audit.prune import TreeProgress, prune_runs
from runledger.infrastructure.audit.restore import restore_runs
from runledger.infrastructure.audit.run_verification import verify_run_models
from runledger.infrastructure.audit.trail import audit_trail
from runledger.infrastructure.event_log import EventLog
from runledger.infrastructure.runtime import ClosedOnExit, StoreRuntime, open_runtime
from runledger.infrastructure.telemetry import COMMAND_SPAN, QUERY_SPAN, TELEMETRY
from runledger.infrastructure.views.projector import Progress
from runledger.projections import follow_up_queue as queue
from runledger.projections import runs, settings
from runledger.projections import session_outbox as outbox
from runledger.projections import terminal_data as terminal
from runledger.projections import viewer_deltas as viewer
from runledger.projections.base import ViewReader

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def _shape(signature: inspect.Signature) -> str:
    """How a store method is called, without its first parameter: ``run_id, *, status``."""
    parts: list[str] = []
    for parameter in list(signature.parameters.values())[1:]:
        if parameter.kind is parameter.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        parts.append(parameter.name)
    return ", ".join(parts)


class _CallShape:
    """What calls fit one store method, so that most calls are checked without
    ``Signature.bind`` (a tenth of a millisecond of every command under the profiler)."""

    def __init__(self, signature: inspect.Signature, name: str) -> None:
        self.signature = signature
        self.name = name
        parameters = list(signature.parameters.values())[1:]
        plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        self._simple = all(parameter.kind in plain for parameter in parameters)
        self._positional = tuple(
            parameter.name
            for parameter in parameters
            if parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        self._names = frozenset(parameter.name for parameter in parameters)
        self._required = frozenset(
            parameter.name for parameter in parameters if parameter.default is parameter.empty
        )

    def check(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise ``InvalidCallError`` when the arguments do not fit the method: Python's own
        ``TypeError`` would name the internal class the store forwards to."""
        if self._fits(args, kwargs):
            return
        try:
            self.signature.bind(None, *args, **kwargs)
        except TypeError as error:
            raise InvalidCallError(
                problem=str(error).capitalize(),
                command=self.name,
                signature=f"({_shape(self.signature)})",
            ) from None

    def _fits(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        # Surely bindable: anything else goes to ``bind``, which also words the error.
        if not self._simple or len(args) > len(self._positional):
            return False
        given = self._positional[: len(args)]
        if not kwargs.keys() <= self._names or not kwargs.keys().isdisjoint(given):
            return False
        return self._required.issubset((*given, *kwargs))


def _run_id(names: tuple[str, ...]) -> Callable[[tuple[Any, ...], dict[str, Any]], object]:
    """How to find the call's ``run_id`` argument, if the method has one (for its span)."""
    if "run_id" not in names:
        return lambda _args, _kwargs: None
    index = names.index("run_id")
    return lambda args, kwargs: args[index] if len(args) > index else kwargs.get("run_id")


def _forward(
    target: Callable[Concatenate[S, P], R],
    subject: Callable[[WorkflowStore], S],
    doc: str,
    kind: str = COMMAND_SPAN,
    *,
    replicated: bool = False,
) -> Callable[Concatenate[WorkflowStore, P], R]:
    """A store method calling ``target`` on the store's ``subject``, with its exact signature.

    Every argument passes ``check_arguments`` first: this is the one door of every command
    and query, so no text or shape that storage cannot hold gets past it to a rule. It is
    also where each call gets its span and metrics (``kind`` names the span). A
    ``replicated`` read may be answered by a replica that has this store's writes.
    """
    signature = inspect.signature(target)
    shape = _CallShape(signature, target.__name__)
    names = tuple(signature.parameters)[1:]
    sized_by_rules = SIZED_BY_RULES.get(target.__name__, frozenset())
    name = target.__name__
    run_id = _run_id(names)

    @functools.wraps(target)
    def forward(store: WorkflowStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        shape.check(args, kwargs)
        check_arguments(names, args, kwargs, sized_by_rules=sized_by_rules)
        runtime = store._runtime

        def call() -> R:
            return target(subject(store), *args, **kwargs)

        with runtime.running():
            return TELEMETRY.call(
                kind,
                name,
                runtime,
                run_id(args, kwargs),
                (lambda: runtime.replicated(call)) if replicated else call,
            )

    forward.__qualname__ = f"WorkflowStore.{target.__name__}"
    forward.__module__ = __name__
    forward.__doc__ = doc
    return forward


def _command(
    method: Callable[Concatenate[WorkflowRuns, P], R], doc: str
) -> Callable[Concatenate[WorkflowStore, P], R]:
    """A store method running a command or consistent read of the application."""
    return _forward(method, lambda store: store._runtime.app, doc)


def _read(
    method: Callable[Concatenate[WorkflowRuns, P], R], doc: str
) -> Callable[Concatenate[WorkflowStore, P], R]:
    """A store method answering a consistent read from the application's aggregates: on a
    replica that has replayed this store's writes, the aggregates are as consistent there."""
    return _forward(method, lambda store: store._runtime.app, doc, QUERY_SPAN, replicated=True)


def _query(
    projection: str, query: Callable[Concatenate[ViewReader, P], R], doc: str
) -> Callable[..., R]:
    """A store method asking ``projection``'s read model, once it has this process's writes
    (on a replica that has them too, when the store has replicas).

    It takes the query's arguments and ``as_of``: with a log position, the answer comes from
    a replay of the log up to there into a scratch model (the live one is not touched).
    """
    # Annotations evaluated where the query is defined: the signature is read elsewhere
    # (help(), the HTTP API's argument models), where the query module's names are unknown.
    signature = inspect.signature(query, eval_str=True)
    shape = _CallShape(signature, query.__name__)
    parameters = list(signature.parameters.values())
    names = tuple(parameter.name for parameter in parameters[1:])
    name = query.__name__
    run_id = _run_id(names)
    as_of = inspect.Parameter(
        "as_of", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=int | None
    )
    store_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)

    # A query's text arguments (ids, sessions) must be text: another type would find nothing
    # and the caller's mistake would read as "not found".
    texts = {
        parameter.name: parameter.annotation == str | None
        for parameter in parameters[1:]
        if parameter.annotation in (str, str | None)
    }

    def check_texts(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for name, value in (*zip(names, args, strict=False), *kwargs.items()):
            if name in texts and not (value is None and texts[name]):
                looked_up_id(name, value)

    @functools.wraps(query)
    def forward(store: WorkflowStore, /, *args: Any, as_of: int | None = None, **kwargs: Any) -> R:
        shape.check(args, kwargs)
        check_texts(args, kwargs)
        check_arguments(names, args, kwargs)
        runtime = store._runtime
        with runtime.running():
            return TELEMETRY.call(
                QUERY_SPAN,
                name,
                runtime,
                run_id(args, kwargs),
                lambda: runtime.query(
                    projection, lambda reader: query(reader, *args, **kwargs), as_of=as_of
                ),
            )

    del forward.__wrapped__  # the signature below is the truth
    forward.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[store_parameter, *parameters[1:], as_of]
    )
    forward.__qualname__ = f"WorkflowStore.{query.__name__}"
    forward.__module__ = __name__
    forward.__doc__ = doc
    return forward


class WorkflowStore(ClosedOnExit):
    """The public entry point: every command, consistent read and read-model query, no more.

    It holds the application rather than being one, so a host cannot reach the library's
    ``save``, ``repository`` or ``take_snapshot`` and bypass the rules. Each method keeps the
    exact signature of the command or query it forwards to. A query made after a command in
    the same process sees its effects.
    """

    __slots__ = ("_runtime",)

    def __init__(self, runtime: StoreRuntime) -> None:
        self._runtime = runtime

    def __repr__(self) -> str:
        return f"WorkflowStore({self._runtime.printable_url!r})"

    # -- commands ---------------------------------------------------------------------------

    create_run = _command(
        WorkflowRuns.create_run,
        'Create a run; a parent makes a continuation child, status="queued" reserves it.',
    )
    bind_origin_session = _command(
        WorkflowRuns.bind_origin_session, "Bind the run to its origin Pi session."
    )
    record_progress = _command(
        WorkflowRuns.record_progress, "Record that the run is running or waiting, and where."
    )
    pause_run = _command(WorkflowRuns.pause_run, "Pause the run.")
    resume_run = _command(WorkflowRuns.resume_run, "Resume a paused run.")
    set_presentation_instructions = _command(
        WorkflowRuns.set_presentation_instructions,
        "Set how the run's terminal result is presented to its origin session.",
    )
    finish_run = _command(
        WorkflowRuns.finish_run, "End the run; a bad end cancels its queued follow-ups."
    )
    interrupt_run = _command(
        WorkflowRuns.interrupt_run, "Fail a running run because its host stopped."
    )
    restart_run = _command(
        WorkflowRuns.restart_run, "Queue a restart child of an ended run from its terminal turn."
    )
    queue_follow_up = _command(
        WorkflowRuns.queue_follow_up, "Queue a follow-up prompt for the run's origin session."
    )
    remove_follow_up = _command(
        WorkflowRuns.remove_follow_up, "Remove a follow-up whose message was not delivered."
    )
    report_branch = _command(
        WorkflowRuns.report_branch,
        "Adopt branch evidence: the only way a workflow message becomes sent.",
    )
    start_turn = _command(
        WorkflowRuns.start_turn, "Start the model turn a sent workflow message triggered."
    )
    end_turn = _command(WorkflowRuns.end_turn, "End a workflow turn with its stop reason.")
    create_workflow_message = _command(
        WorkflowRuns.create_workflow_message,
        "Create the host's notification, step or decision message for the run's origin session.",
    )
    publish_update = _command(
        WorkflowRuns.publish_update,
        "Publish a progress update; the latest per (type, key) is current.",
    )

    # -- settings ---------------------------------------------------------------------------

    ensure_settings_scope = _command(
        WorkflowRuns.ensure_settings_scope,
        "The run's settings scope for a mount and invocation, created once with its policy.",
    )
    change_settings = _command(
        WorkflowRuns.change_settings,
        "Apply an RFC 6902 patch to a settings scope under its policy.",
    )

    # -- human decisions --------------------------------------------------------------------

    request_human_decision = _command(
        WorkflowRuns.request_human_decision,
        "Open the decision of a node attempt; the same request again is adopted.",
    )
    answer_human_decision = _command(
        WorkflowRuns.answer_human_decision,
        "Submit an answer: won, adopted, already_resolved or conflict.",
    )
    apply_decision_timeout = _command(
        WorkflowRuns.apply_decision_timeout,
        "At the deadline: accept the default answer, or cancel without one.",
    )
    cancel_human_decision = _command(
        WorkflowRuns.cancel_human_decision, "Cancel a pending decision with its provenance."
    )
    continue_after_decision = _command(
        WorkflowRuns.continue_after_decision,
        "The continuation child of an accepted decision, created once with its receipt.",
    )

    # -- run leases -------------------------------------------------------------------------

    claim_run = _command(
        WorkflowRuns.claim_run, "Take the run's lease; None while any live lease exists."
    )
    renew_claim = _command(WorkflowRuns.renew_claim, "Extend the current, unexpired lease.")
    release_claim = _command(WorkflowRuns.release_claim, "Give the run's lease up.")

    # -- session recording ------------------------------------------------------------------

    record_session_binding = _command(
        WorkflowRuns.record_session_binding,
        "Start recording a Pi session for the run (attempt); binding again is a no-op.",
    )
    append_session_entry = _command(
        WorkflowRuns.append_session_entry, "Record one Pi session entry; returns its sequence."
    )
    append_session_events = _command(
        WorkflowRuns.append_session_events, "Record a batch of durable session event records."
    )
    update_session_capture = _command(
        WorkflowRuns.update_session_capture, "Record the session capture's state."
    )
    session_segments = _read(
        WorkflowRuns.session_segments, "The run's session segments with their integrity."
    )
    session_entries = _read(
        WorkflowRuns.session_entries, "A page of the run's recorded session entries."
    )
    session_events = _read(
        WorkflowRuns.session_events, "A page of the run's recorded session event records."
    )

    # -- managed effects --------------------------------------------------------------------

    reserve_effect = _command(
        WorkflowRuns.reserve_effect, "Reserve a side effect of the run before applying it."
    )
    settle_effect = _command(
        WorkflowRuns.settle_effect, "End the applying attempt of an effect: applied or failed."
    )
    recover_applying_effects = _command(
        WorkflowRuns.recover_applying_effects,
        'After a crash, settle what applying effects mean: "safe" or "ambiguous".',
    )
    retry_effect = _command(
        WorkflowRuns.retry_effect, "Let a failed or ambiguous effect be attempted again."
    )
    get_effect = _read(WorkflowRuns.get_effect, "The effect, or None for an unknown id.")

    # -- consistent reads from aggregates ---------------------------------------------------

    get_run = _read(WorkflowRuns.get_run, "The run, or None for an unknown id.")
    get_follow_up = _read(WorkflowRuns.get_follow_up, "The follow-up, or None for an unknown id.")
    get_workflow_message = _read(
        WorkflowRuns.get_workflow_message, "The workflow message, or None for an unknown id."
    )
    get_turn = _read(WorkflowRuns.get_turn, "The workflow turn, or None for an unknown id.")
    get_human_decision = _read(
        WorkflowRuns.get_human_decision, "The human decision, or None for an unknown id."
    )
    event_log = _forward(
        EventLog.event_log,
        lambda store: store._runtime.log,
        "The stored events in log order; with run_id, only that run's and its children's.",
        QUERY_SPAN,
    )

    # -- read models ------------------------------------------------------------------------

    follow_up_queue = _query(
        "follow_up_queue",
        queue.follow_up_queue,
        "The run's follow-up queue with each delivery; None without an origin session.",
    )
    follow_up_queue_range = _query(
        "follow_up_queue",
        queue.follow_up_queue_range,
        "The run's follow-up queue cut to at most limit follow-ups from offset start.",
    )
    terminal_data = _query(
        "terminal_data",
        terminal.terminal_data,
        "The ended run's eight terminal fields; None for an unknown or not yet ended run.",
    )
    viewer_deltas = _query(
        "viewer_deltas",
        viewer.viewer_deltas,
        "The viewer deltas after a revision, or snapshot_required when they are gone.",
    )
    session_outbox = _query(
        "session_outbox",
        outbox.session_outbox,
        "Every workflow message of the session, in session-wide order.",
    )
    next_deliverable = _query(
        "session_outbox",
        outbox.next_deliverable,
        "The session's first message eligible for delivery, or None.",
    )
    settings_scopes = _query(
        "settings",
        settings.settings_scopes,
        "The settings scopes active on the run, by mount path and invocation.",
    )
    settings_scope_at_change = _query(
        "settings",
        settings.settings_scope_at_change,
        "The settings scope as it was right after a change (0: as created); None if unknown.",
    )
    list_runs = _query(
        "runs",
        runs.list_runs,
        "Runs in creation order, filtered by status, session or root run, keyset-paged.",
    )

    # -- operations -------------------------------------------------------------------------

    def projection_names(self) -> list[str]:
        """The names of the projections this store keeps."""
        with self._runtime.running():
            return self._runtime.projection_names()

    def projection_status(self) -> list[ProjectionStatus]:
        """Each projection's version, position, lag, active and building version, last error."""
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                QUERY_SPAN, "projection_status", runtime, None, runtime.projection_status
            )

    def rebuild_projection(self, name: str, *, progress: Progress | None = None) -> int:
        """Rebuild the read model beside the live one, switch to it, drop the old; events read."""
        if progress is not None and not callable(progress):
            # Checked before anything is built: a rebuild must not fail half-way through.
            raise InvalidProgressError()
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                COMMAND_SPAN,
                "rebuild_projection",
                runtime,
                None,
                lambda: runtime.rebuild_projection(name, progress=progress),
            )

    def read_model_digest(self, name: str, *, as_of: int | None = None) -> str:
        """SHA-256 of every row of the read model (canonical, order-independent), or as of N."""
        check_arguments(("name", "as_of"), (name,), {"as_of": as_of})
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                QUERY_SPAN,
                "read_model_digest",
                runtime,
                None,
                lambda: runtime.read_model_digest(name, as_of=as_of),
            )

    # -- read-your-writes across processes --------------------------------------------------

    def position_token(self) -> str:
        """An opaque token of what this store has written, for another's reading_after."""
        with self._runtime.running():
            return self._runtime.position_token()

    def reading_after(self, token: str) -> None:
        """From now on this store's reads see what the token's store had written."""
        with self._runtime.running():
            self._runtime.reading_after(token)

    # -- audit ------------------------------------------------------------------------------

    def audit_run(
        self, run_id: str, *, lineage: bool = False, as_of: int | None = None
    ) -> AuditTrail:
        """The run's timeline up to ``as_of``; with ``lineage``, its ancestors' and descendants'."""
        check_arguments(("run_id",), (run_id,), {})
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                QUERY_SPAN,
                "audit_run",
                runtime,
                run_id,
                lambda: audit_trail(runtime, run_id, lineage=lineage, as_of=as_of),
            )

    def verify_run(self, run_id: str) -> AuditVerdict:
        """Replay and re-project the run's tree; the verdict names the first row that differs."""
        check_arguments(("run_id",), (run_id,), {})
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                QUERY_SPAN,
                "verify_run",
                runtime,
                run_id,
                lambda: verify_run_models(runtime, run_id),
            )

    def export_run(
        self,
        run_id: str,
        path: str | os.PathLike[str],
        *,
        lineage: bool = True,
        progress: Progress | None = None,
    ) -> int:
        """Write the run's audit bundle for ``verify_bundle``; returns how many events it holds."""
        check_arguments(("run_id",), (run_id,), {})
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                QUERY_SPAN,
                "export_run",
                runtime,
                run_id,
                lambda: export_bundle(runtime, run_id, path, lineage=lineage, progress=progress),
            )

    # -- retention --------------------------------------------------------------------------

    def prune_runs(
        self,
        *,
        settled_before: datetime,
        archive: str | os.PathLike[str],
        limit: int | None = None,
        dry_run: bool = False,
        progress: TreeProgress | None = None,
    ) -> PruneReport:
        """Archive each run tree settled before the cutoff to a verified bundle, then prune it."""
        if progress is not None and not callable(progress):
            raise InvalidProgressError()
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                COMMAND_SPAN,
                "prune_runs",
                runtime,
                None,
                lambda: prune_runs(
                    runtime,
                    settled_before=settled_before,
                    archive=archive,
                    limit=limit,
                    dry_run=dry_run,
                    progress=progress,
                ),
            )

    def restore_runs(self, bundle: str | os.PathLike[str]) -> RestoredTree:
        """Put a pruned run tree back from its bundle once it matches the tree's tombstone."""
        runtime = self._runtime
        with runtime.running():
            return TELEMETRY.call(
                COMMAND_SPAN,
                "restore_runs",
                runtime,
                None,
                lambda: restore_runs(runtime, bundle),
            )

    def close(self) -> None:
        """Stop projecting and close every connection; closing again does nothing."""
        self._runtime.close()


def open_store(
    url: str | os.PathLike[str] | None = None,
    *,
    clock: Clock = utc_now,
    allow_host_session_recording: bool = False,
    env: Mapping[str, str] | None = None,
    embedded_projections: bool = True,
    projections: Sequence[str] | None = None,
    create: bool = True,
) -> WorkflowStore:
    """Open the store at ``url`` (``sqlite:///file``, ``postgresql://…`` or ``memory://``; a
    plain or ``os.PathLike`` path names a SQLite file).

    Without ``url``: ``RUNLEDGER_URL`` from ``env`` (default: the process environment), else
    ``sqlite:///runledger.db``. A store that does not exist yet is created (a SQLite file in a
    folder that exists, runledger's tables in a PostgreSQL database); with ``create=False`` it
    is a ``StoreNotFoundError`` instead, as read-only tools want. With ``embedded_projections``
    (the default) read models catch up in this process after every command; without, a
    separate ``runledger projections run`` worker keeps them. ``projections`` limits the store
    to some read models. Times come from ``clock``. With ``allow_host_session_recording``
    session recording skips the run's write authority (upstream 0.16.2's host records after
    the worker's lease ended).
    """
    # The public signature is spelled out here, once for hosts; open_runtime mirrors it.
    return WorkflowStore(
        open_runtime(
            url,
            clock=clock,
            allow_host_session_recording=allow_host_session_recording,
            env=env,
            embedded_projections=embedded_projections,
            projections=projections,
            create=create,
        )
    )


__all__: Sequence[str] = ["WorkflowStore", "open_store"]
