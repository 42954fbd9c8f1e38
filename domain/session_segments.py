"""The SessionSegment aggregate: the recorded Pi session of one run attempt (upstream §3.12).

A segment holds its binding, status and counts; the entries and event records themselves
live only in its events (one ``session.events-appended`` per batch, not one per record), so
loading a segment costs the same after ten batches as after ten thousand.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import orjson
from eventsourcing.domain import BaseAggregate

from runledger.domain.canonical import canonical_json, check_plain_json, sha256hex
from runledger.domain.errors import (
    CaptureFailureForbiddenError,
    CaptureFailureRequiredError,
    IncrementalSessionEventError,
    InvalidCaptureAttemptError,
    InvalidSessionCaptureError,
    InvalidSessionEntryError,
    InvalidSessionEventBatchError,
    InvalidSessionEventSeqError,
    InvalidSessionIdError,
    SessionBindingMismatchError,
    SessionCaptureStoppedError,
    SessionEventBatchTooLargeError,
    SessionEventEnvelopeError,
    SessionEventTooLargeError,
    UnexpectedSessionEventSeqError,
)
from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id
from runledger.domain.records import SessionSegmentRecord
from runledger.domain.values import (
    CAPTURE_STATUSES,
    MAX_SESSION_BATCH_BYTES,
    SESSION_EVENT_TYPES,
    Actor,
    CaptureStatus,
    JsonValue,
    is_count,
)

BINDING_SCHEMA: Final = "pi-workflows.session-binding.v1"
CAPTURE_SCHEMA: Final = "pi-workflows.session-capture.v1"
EVENT_SCHEMA: Final = "pi-workflows.session-event.v1"
MAX_EVENT_BYTES: Final = 1_048_576
MAX_SAFE_INTEGER: Final = 2**53 - 1
CAPTURE_COUNTS: Final = ("entryCount", "eventCount")
COUNTS_DIAGNOSTIC: Final = "session capture counts do not match durable rows"
RECORDING_DIAGNOSTIC: Final = "terminal run still reports recording capture"


def segment_id_for(run_id: str, attempt_id: str | None) -> str:
    """Upstream §2.6: the run-level ("flat") segment has attempt id ""."""
    return "segment-" + sha256hex(f"{run_id}\0{attempt_id or ''}")[:40]


def segment_aggregate_id(segment_id: str) -> UUID:
    return aggregate_id("segment", segment_id)


def segments_of_run_key(run_id: str) -> str:
    """The index key under which every segment of ``run_id`` is found."""
    return f"segments-of:{run_id}"


def check_attempt_id(attempt_id: object) -> str | None:
    """A capture attempt is named by non-empty text; None is the run-level segment."""
    if attempt_id is not None and (not isinstance(attempt_id, str) or not attempt_id):
        raise InvalidCaptureAttemptError()
    return attempt_id


def check_binding(run_id: str, binding: object) -> tuple[dict[str, Any], str]:
    """Upstream §3.12: the binding names this run and has the v1 schema; it names a session."""
    if (
        not isinstance(binding, dict)
        or binding.get("runId") != run_id
        or binding.get("schema") != BINDING_SCHEMA
    ):
        raise SessionBindingMismatchError()
    session_id = binding.get("piSessionId")
    if not isinstance(session_id, str) or not session_id.strip():
        raise InvalidSessionIdError()
    check_plain_json(binding, "binding")
    return binding, session_id


def check_entry(entry: object) -> dict[str, Any]:
    """A session entry is a JSON object (Pi's entry as it is)."""
    if not isinstance(entry, dict):
        raise InvalidSessionEntryError()
    check_plain_json(entry, "entry")
    return entry


def check_event_batch(records: object) -> list[dict[str, Any]]:
    """A batch is a list (or tuple) of record objects; each is checked in the segment."""
    if not isinstance(records, list | tuple) or not all(isinstance(r, dict) for r in records):
        raise InvalidSessionEventBatchError()
    return list(records)


def check_event_record(
    record: dict[str, Any], expected_seq: int, *, size_proven: bool = False
) -> None:
    """Decision 21's order: seq shape, envelope, no incremental delta, expected seq, size
    (unless ``size_proven``: see ``small_batch``)."""
    seq = record.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq <= MAX_SAFE_INTEGER:
        raise InvalidSessionEventSeqError()
    at, payload = record.get("at"), record.get("payload")
    if (
        not isinstance(at, str)
        or not at
        or not isinstance(record.get("nodeId"), str)
        or not isinstance(record.get("attemptId"), str)
        or not isinstance(payload, dict)
        or record.get("type") not in SESSION_EVENT_TYPES
    ):
        raise SessionEventEnvelopeError()
    if record["type"] == "assistant_event" and str(payload.get("type", "")).endswith("_delta"):
        raise IncrementalSessionEventError()
    if seq != expected_seq:
        raise UnexpectedSessionEventSeqError(expected=expected_seq, got=seq)
    if not size_proven and exceeds_event_limit(record):
        raise SessionEventTooLargeError(limit=MAX_EVENT_BYTES)


def small_batch(records: Sequence[dict[str, Any]]) -> bool:
    """Whether the whole batch proves at once that no record is over ``MAX_EVENT_BYTES`` and
    the batch not over ``MAX_SESSION_BATCH_BYTES``: one orjson encoding that reads back equal
    and whose bytes, three times over, are within both (the bound of
    ``exceeds_event_limit``; each record's encoding is a part of the batch's). What hosts
    send is proven so, once a batch instead of twice a record."""
    try:
        encoded = orjson.dumps(records)
    except orjson.JSONEncodeError:
        return False
    return (
        3 * len(encoded) <= min(MAX_EVENT_BYTES, MAX_SESSION_BATCH_BYTES)
        and orjson.loads(encoded) == records
    )


def exceeds_event_limit(record: dict[str, Any]) -> bool:
    """Whether the record's canonical JSON is over 1 MiB of UTF-8, raising upstream's error
    for what canonical JSON refuses (a non-finite number, a key that is not text).

    Exact, and fast for what hosts send: orjson spells only numbers differently from
    canonical JSON (at most three times the bytes either way), so a small orjson encoding
    that reads back equal (no NaN or infinity turned into null) proves the record fits;
    anything else is measured by the slow canonical writer itself.
    """
    try:
        encoded = orjson.dumps(record)
    except orjson.JSONEncodeError:
        encoded = None
    if (
        encoded is not None
        and 3 * len(encoded) <= MAX_EVENT_BYTES
        and orjson.loads(encoded) == record
    ):
        return False
    return _canonical_bytes(record) > MAX_EVENT_BYTES


def check_batch_size(records: Sequence[dict[str, Any]]) -> None:
    """The store's limit on a batch, after every record's own checks (decision 28): the
    records' canonical bytes summed are at most ``MAX_SESSION_BATCH_BYTES``. Measured exactly
    only when three times their orjson bytes (a bound, see ``exceeds_event_limit``) is over."""
    bound = 0
    for record in records:
        try:
            bound += 3 * len(orjson.dumps(record))
        except orjson.JSONEncodeError:
            bound = MAX_SESSION_BATCH_BYTES + 1
            break
    if bound <= MAX_SESSION_BATCH_BYTES:
        return
    if sum(_canonical_bytes(record) for record in records) > MAX_SESSION_BATCH_BYTES:
        raise SessionEventBatchTooLargeError(limit=MAX_SESSION_BATCH_BYTES)


def _canonical_bytes(record: dict[str, Any]) -> int:
    return len(canonical_json(record).encode("utf-8", "surrogatepass"))


def check_capture(capture: object) -> tuple[dict[str, Any], CaptureStatus]:
    """Upstream §3.12's capture projection: schemas, status, counts, then failure details."""
    if (
        not isinstance(capture, dict)
        or capture.get("schema") != CAPTURE_SCHEMA
        or capture.get("eventSchema") != EVENT_SCHEMA
        or capture.get("status") not in CAPTURE_STATUSES
        # Upstream bounds no count; plain JSON bounds each to what a backend stores.
        or not all(is_count(capture.get(name), None) for name in CAPTURE_COUNTS)
    ):
        raise InvalidSessionCaptureError()
    check_plain_json(capture, "capture")
    status: CaptureStatus = capture["status"]
    has_failure = capture.get("failure") is not None
    if status == "failed" and not has_failure:
        raise CaptureFailureRequiredError()
    if status != "failed" and has_failure:
        raise CaptureFailureForbiddenError()
    return capture, status


class SessionSegment(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """One recorded session segment of a run: binding, status and counts."""

    TOPIC = "session-segment"

    segment_id: str
    run_id: str
    attempt_id: str | None
    session_id: str
    binding: dict[str, Any]
    status: CaptureStatus
    entry_count: int
    event_count: int
    last_event_seq: int
    capture: dict[str, Any] | None
    failure: JsonValue

    def __init__(self) -> None:
        """State is set by the Created event."""

    class Event(LedgerEvent):
        """Base of every SessionSegment event."""

        segment_id: str

    class Created(Event, LedgerCreated):
        """The host bound a Pi session to the run (attempt): recording starts."""

        TOPIC = "session.segment-created"
        attempt_id: str | None
        session_id: str
        binding: dict[str, Any]

        def lookup_key(self) -> str | None:
            return segments_of_run_key(self.run_id)

        def apply(self, segment: SessionSegment) -> None:
            segment.segment_id = self.segment_id
            segment.run_id = self.run_id
            segment.attempt_id = self.attempt_id
            segment.session_id = self.session_id
            segment.binding = self.binding
            segment.status = "recording"
            segment.entry_count = 0
            segment.event_count = 0
            segment.last_event_seq = 0
            segment.capture = None
            segment.failure = None

    class EntryAppended(Event):
        """One Pi session entry was recorded."""

        TOPIC = "session.entry-appended"
        entry_seq: int
        entry_id: str
        entry: dict[str, Any]

        def apply(self, segment: SessionSegment) -> None:
            segment.entry_count = self.entry_seq

    class EventsAppended(Event):
        """A batch of durable session event records was recorded (one event per batch)."""

        TOPIC = "session.events-appended"
        first_seq: int
        last_seq: int
        records: list[dict[str, Any]]

        def apply(self, segment: SessionSegment) -> None:
            segment.event_count += len(self.records)
            segment.last_event_seq = self.last_seq

    class CaptureUpdated(Event):
        """The host reported the capture's state (recording, complete or failed)."""

        TOPIC = "session.capture-updated"
        capture: dict[str, Any]

        def apply(self, segment: SessionSegment) -> None:
            segment.capture = self.capture
            segment.status = self.capture["status"]
            segment.failure = self.capture.get("failure")

    class Snapshot(LedgerSnapshot):
        """The segment at a version."""

        TOPIC = "session-segment.snapshot"

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def bind(
        cls,
        segment_id: str,
        *,
        run_id: str,
        attempt_id: str | None,
        session_id: str,
        binding: dict[str, Any],
        now: datetime,
    ) -> SessionSegment:
        """Start recording the Pi session ``binding`` names (actor: that session)."""
        return cls._create(
            cls.Created,
            id=segment_aggregate_id(segment_id),
            timestamp=now,
            actor=Actor("session", session_id).to_json(),
            run_id=run_id,
            segment_id=segment_id,
            attempt_id=attempt_id,
            session_id=session_id,
            binding=binding,
        )

    def append_entry(self, entry: dict[str, Any], *, now: datetime) -> int:
        """Record one entry; its id is ``entry.id`` when that is text, else ``entry-<seq>``."""
        seq = self.entry_count + 1
        entry_id = entry.get("id")
        self._trigger(
            self.EntryAppended,
            now,
            entry_seq=seq,
            entry_id=entry_id if isinstance(entry_id, str) else f"entry-{seq}",
            entry=entry,
        )
        return seq

    def append_events(self, records: Sequence[dict[str, Any]], *, now: datetime) -> None:
        """Record a batch; every record is checked (in order) before any is kept."""
        if not records:
            return
        if self.status != "recording":
            raise SessionCaptureStoppedError()
        expected = self.last_event_seq + 1
        # Proving the sizes first changes no error's order: it only skips checks that pass.
        proven = small_batch(records)
        for record in records:
            check_event_record(record, expected, size_proven=proven)
            expected += 1
        if not proven:
            check_batch_size(records)
        self._trigger(
            self.EventsAppended,
            now,
            first_seq=self.last_event_seq + 1,
            last_seq=expected - 1,
            records=list(records),
        )

    def update_capture(
        self, capture: dict[str, Any], status: CaptureStatus, *, now: datetime
    ) -> None:
        """Keep the capture's end monotonic: a failed segment stays failed, a complete one
        complete (upstream ignores the other updates)."""
        if self.status in ("failed", "complete") and status != self.status:
            return
        self._trigger(self.CaptureUpdated, now, capture=capture)

    def _trigger(
        self, event_class: type[SessionSegment.Event], now: datetime, **kwargs: Any
    ) -> None:
        self.trigger_event(
            event_class,
            timestamp=now,
            actor=Actor("session", self.session_id).to_json(),
            run_id=self.run_id,
            segment_id=self.segment_id,
            **kwargs,
        )

    # -- reads ----------------------------------------------------------------------------

    def diagnostics(self, *, run_has_ended: bool) -> list[str]:
        """Upstream's integrity checks when reading: the capture's counts match the
        recorded rows, and an ended run's capture is no longer recording."""
        found = []
        capture = self.capture
        if capture is not None and (
            capture.get("entryCount") != self.entry_count
            or capture.get("eventCount") != self.event_count
        ):
            found.append(COUNTS_DIAGNOSTIC)
        if run_has_ended and self.status == "recording":
            found.append(RECORDING_DIAGNOSTIC)
        return found

    def to_record(self, *, run_has_ended: bool = False) -> SessionSegmentRecord:
        """The segment as ``session_segments`` returns it, with its integrity."""
        diagnostics = self.diagnostics(run_has_ended=run_has_ended)
        return SessionSegmentRecord(
            segment_id=self.segment_id,
            run_id=self.run_id,
            attempt_id=self.attempt_id,
            session_id=self.session_id,
            binding=self.binding,
            status=self.status,
            entry_count=self.entry_count,
            event_count=self.event_count,
            last_event_seq=self.last_event_seq,
            capture=self.capture,
            failure=self.failure,
            created_at=self.created_on,
            updated_at=self.modified_on,
            integrity="invalid" if diagnostics else "valid",
            diagnostics=diagnostics,
        )
