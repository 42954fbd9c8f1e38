"""Traces and metrics through the OpenTelemetry API only: no-ops until a host installs an SDK.

One ``TELEMETRY`` holds the tracer and the instruments. Spans carry names, ids, counts and
outcomes, never payload text (prompts, inputs, outputs, settings values) nor a password:
attributes are set here (and the gauges' labels by what ``watch`` reads: a store's
``observe``, the server's probes), from the keys below, listed in the README.

Without an SDK a span is not even started (the API's no-op span costs microseconds, several
per command); a tracer provider set later, or given to ``configure``, is used from then on.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from eventsourcing.persistence import IntegrityError, StoredEvent
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import ProxyTracerProvider, Span, SpanKind, Tracer, TracerProvider
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from runledger.domain.errors import WorkflowError

R = TypeVar("R")

INSTRUMENTATION: Final = "runledger"
COMMAND_SPAN: Final = "runledger.command"
QUERY_SPAN: Final = "runledger.query"
COMMIT_SPAN: Final = "runledger.commit"
READ_MODELS_SPAN: Final = "runledger.read_models"
CATCH_UP_SPAN: Final = "runledger.catch_up"
PAGE_SPAN: Final = "runledger.projection.page"
REBUILD_SPAN: Final = "runledger.rebuild"
VERIFY_SPAN: Final = "runledger.verify"

# Attribute keys (spans and metrics), in one place.
NAME: Final = "runledger.name"
BACKEND: Final = "runledger.backend"
STORE: Final = "runledger.store"
RUN_ID: Final = "runledger.run_id"
OUTCOME: Final = "runledger.outcome"
RETRIES: Final = "runledger.retries"
CONFLICT: Final = "runledger.conflict"
GROUP_SIZE: Final = "runledger.commit.group_size"
EVENTS: Final = "runledger.events"
SAME_COMMIT: Final = "runledger.read_models.same_commit"
PROJECTION: Final = "runledger.projection"
PROJECTIONS: Final = "runledger.projections"
FIRST_POSITION: Final = "runledger.position.first"
LAST_POSITION: Final = "runledger.position.last"
EVENT_NAME: Final = "runledger.event"
KIND: Final = "runledger.kind"
STATE: Final = "state"

OK: Final = "ok"
FAILED: Final = "error"
"""The outcome of a call that raised something other than a ``WorkflowError`` (whose outcome
is its stable code)."""

logger = logging.getLogger(__name__)


@dataclass
class _Call:
    """What the commit spans of one command tell its command span."""

    conflicts: int = 0


_CALL: ContextVar[_Call | None] = ContextVar("runledger_call", default=None)


class _Counted:
    """A monotonic count per label values, kept here and read by an observable counter at
    each collection. A synchronous counter's ``add`` costs an SDK about 10 us (attributes
    checked and hashed, an exemplar offered), and a command made three of them; this costs
    a dictionary update. The counts start at zero with each ``configure``, as a new
    synchronous counter's would."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self._keys = keys
        self._counts: dict[tuple[str, ...], int] = {}
        # Commands count from several threads; ``+=`` on a dict entry is not atomic.
        self._lock = threading.Lock()

    def add(self, values: tuple[str, ...]) -> None:
        """Count one under these label values (in the order of ``keys``)."""
        with self._lock:
            self._counts[values] = self._counts.get(values, 0) + 1

    def add_each(self, each: Iterable[tuple[str, ...]]) -> None:
        """Count one under each of these label values."""
        counts = self._counts
        with self._lock:
            for values in each:
                counts[values] = counts.get(values, 0) + 1

    def observe(self, _options: CallbackOptions) -> Iterator[Observation]:
        """The counts so far, one observation per label values."""
        with self._lock:
            counts = list(self._counts.items())
        for values, count in counts:
            yield Observation(count, dict(zip(self._keys, values, strict=True)))


class Backed(Protocol):
    """What a call's span needs of the store it ran on (a ``StoreRuntime``)."""

    @property
    def backend(self) -> str:
        """The store URL's scheme."""
        ...


class Telemetry:
    """The tracer and instruments runledger reports through (see the README's tables)."""

    def __init__(self) -> None:
        self.enabled = True
        """False: no span and no measurement at all (the bench's uninstrumented baseline)."""
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()
        self.configure()

    def configure(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        """Report to these providers (default: the global ones, whenever they are set)."""
        self._explicit_tracer = tracer_provider is not None
        self._tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        self.commands = _Counted((NAME, OUTCOME, BACKEND))
        meter.create_observable_counter(
            "runledger.commands",
            callbacks=[self.commands.observe],
            unit="{call}",
            description="Commands and queries completed.",
        )
        self.duration = meter.create_histogram(
            "runledger.command.duration", unit="s", description="Duration of commands and queries."
        )
        self.retries = meter.create_counter(
            "runledger.command.retries",
            unit="{retry}",
            description="Runs of a command again after a version conflict.",
        )
        self.conflicts = meter.create_counter(
            "runledger.commit.conflicts",
            unit="{conflict}",
            description="Commits refused on an aggregate's version (another writer was first).",
        )
        self.group_size = meter.create_histogram(
            "runledger.commit.group_size",
            unit="{command}",
            description="Commands committed together in one transaction (group commit).",
        )
        self.appended = _Counted((EVENT_NAME,))
        meter.create_observable_counter(
            "runledger.events.appended",
            callbacks=[self.appended.observe],
            unit="{event}",
            description="Events appended, by name.",
        )
        self.rebuilt = meter.create_counter(
            "runledger.rebuild.events",
            unit="{event}",
            description="Events replayed into rebuilt read models (rebuild progress).",
        )
        gauges = (
            ("runledger.projection.lag.events", "{event}", "Events a read model is behind."),
            ("runledger.projection.lag.duration", "s", "Age of its oldest unprojected event."),
            ("runledger.projection.stalled", "{projection}", "1 while a read model is stalled."),
            ("runledger.pool.connection.count", "{connection}", "Pooled connections by state."),
            ("runledger.pool.pending_requests", "{request}", "Calls waiting for a connection."),
            ("runledger.serve.sse.clients", "{client}", "Open viewer event streams."),
        )
        for name, unit, description in gauges:
            meter.create_observable_gauge(
                name, callbacks=[self._gauge(name)], unit=unit, description=description
            )

    # -- what the gauges read -------------------------------------------------------------

    def watch(self, watched: Any) -> None:
        """Read ``watched.observe()`` on every collection while it lives (a store, a server)."""
        self._watched.add(watched)

    def unwatch(self, watched: Any) -> None:
        """Stop reading ``watched`` (it closed)."""
        self._watched.discard(watched)

    def _gauge(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterator[Observation]:
            for watched in list(self._watched):
                try:
                    readings = list(watched.observe())
                except Exception as error:
                    # A store closing or unreachable mid-collection: the others still report.
                    logger.warning("metrics of %r not read: %s", watched, type(error).__name__)
                    continue
                for gauge, value, attributes in readings:
                    if gauge == name:
                        yield Observation(value, attributes)

        return observe

    # -- spans ----------------------------------------------------------------------------

    def tracer(self) -> Tracer | None:
        """The tracer, or None while nobody listens (no SDK, or telemetry disabled)."""
        if not self.enabled:
            return None
        if self._explicit_tracer or type(trace.get_tracer_provider()) is not ProxyTracerProvider:
            return self._tracer
        return None

    @contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[Span | None]:
        """A child span of the current one, or None (and nothing started) while off."""
        tracer = self.tracer()
        if tracer is None:
            yield None
            return
        with tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except BaseException as error:
                _failed(span, error)
                raise

    def call(
        self,
        kind: str,
        name: str,
        runtime: Backed,
        run_id: object,
        call: Callable[[], R],
    ) -> R:
        """Run a public command or query (``kind``: its span name) with its span and metrics."""
        if not self.enabled:
            return call()
        state = _Call()
        token = _CALL.set(state)
        started = time.perf_counter()
        outcome = OK
        tracer = self.tracer()
        span = None
        if tracer is not None:
            attributes: dict[str, Any] = {NAME: name, BACKEND: runtime.backend}
            if isinstance(run_id, str):
                attributes[RUN_ID] = run_id
            span = tracer.start_span(
                kind, kind=SpanKind.INTERNAL, attributes=attributes, record_exception=False
            )
            context_token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return call()
        except BaseException as error:
            outcome = error.code if isinstance(error, WorkflowError) else FAILED
            if span is not None:
                _failed(span, error)
            raise
        finally:
            backend = runtime.backend
            self.commands.add((name, outcome, backend))
            self.duration.record(
                time.perf_counter() - started, {NAME: name, OUTCOME: outcome, BACKEND: backend}
            )
            if state.conflicts:
                self.retries.add(state.conflicts, {NAME: name})
            _CALL.reset(token)
            if span is not None:
                span.set_attribute(OUTCOME, outcome)
                span.set_attribute(RETRIES, state.conflicts)
                span.set_attribute(CONFLICT, state.conflicts > 0)
                otel_context.detach(context_token)
                span.end()

    @contextmanager
    def commit(self) -> Iterator[None]:
        """Around one transaction of a command's events (and its read models, if with them)."""
        if not self.enabled:
            yield
            return
        with self.span(COMMIT_SPAN, **{GROUP_SIZE: 1}) as span:
            try:
                yield
            except IntegrityError:
                self.conflicts.add(1)
                state = _CALL.get()
                if state is not None:
                    state.conflicts += 1
                if span is not None:
                    span.set_attribute(CONFLICT, True)
                raise

    def committed(self, stored_events: Sequence[StoredEvent], group_size: int) -> None:
        """A command's events are in the log, in a transaction of ``group_size`` commands."""
        if not self.enabled:
            return
        self.appended.add_each((stored.topic,) for stored in stored_events)
        if group_size != 1:
            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute(GROUP_SIZE, group_size)

    def note(self, key: str, value: AttributeValue) -> None:
        """Set an attribute on the current span, if one records."""
        if self.enabled:
            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute(key, value)

    def grouped(self, size: int) -> None:
        """A group of ``size`` commands committed in one transaction."""
        if self.enabled:
            self.group_size.record(size)

    # -- projections ----------------------------------------------------------------------

    @contextmanager
    def catch_up(self) -> Iterator[_Pages]:
        """Around a catch-up: its span starts with its first page (an idle one leaves none)."""
        pages = _Pages(self.tracer())
        try:
            yield pages
        except BaseException as error:
            if pages.span is not None:
                _failed(pages.span, error)
            raise
        finally:
            pages.end()

    def progress(
        self, span: Span | None, progress: Callable[[int], None] | None
    ) -> Callable[[int], None] | None:
        """``progress`` that also counts rebuilt events and adds progress events to ``span``."""
        if not self.enabled:
            return progress
        total = 0

        def report(events: int) -> None:
            nonlocal total
            total += events
            self.rebuilt.add(events)
            if span is not None:
                span.add_event("progress", {EVENTS: total})
            if progress is not None:
                progress(events)

        return report


class _Pages:
    """The pages of one catch-up, each a span under the catch-up's."""

    def __init__(self, tracer: Tracer | None) -> None:
        self._tracer = tracer
        self.span: Span | None = None
        self._context: otel_context.Context | None = None
        self.events = 0

    @contextmanager
    def page(self, runners: Sequence[str], first: int, last: int) -> Iterator[None]:
        """Around one page of the log (positions ``first`` to ``last``) for these runners."""
        if self._tracer is None:
            yield
            return
        if self.span is None:
            self.span = self._tracer.start_span(CATCH_UP_SPAN, record_exception=False)
            self._context = trace.set_span_in_context(self.span)
        attributes: dict[str, AttributeValue] = {
            PROJECTIONS: list(runners),
            FIRST_POSITION: first,
            LAST_POSITION: last,
        }
        span = self._tracer.start_span(
            PAGE_SPAN, context=self._context, attributes=attributes, record_exception=False
        )
        try:
            yield
        except BaseException as error:
            _failed(span, error)
            raise
        finally:
            span.end()

    def applied(self, events: int) -> None:
        """The page just ended covered ``events`` events."""
        self.events += events

    def end(self) -> None:
        if self.span is not None:
            self.span.set_attribute(EVENTS, self.events)
            self.span.end()


def _failed(span: Span, error: BaseException) -> None:
    """Mark ``span`` failed with the error's type and code only: messages may quote inputs."""
    code = error.code if isinstance(error, WorkflowError) else type(error).__name__
    span.set_status(Status(StatusCode.ERROR, code))
    span.add_event("exception", {"exception.type": type(error).__qualname__})


TELEMETRY: Final = Telemetry()
"""The process's telemetry (``configure`` points it at other providers)."""


__all__: Sequence[str] = ["COMMAND_SPAN", "QUERY_SPAN", "TELEMETRY", "Telemetry"]
