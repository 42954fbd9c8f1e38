"""``audit_run``: a run's timeline, from the stored events of the runs it covers."""

from __future__ import annotations

from runledger.domain.errors import AsOfBeyondLogError, InvalidAuditArgumentError
from runledger.domain.records import AuditEntry, AuditTrail
from runledger.domain.values import is_count
from runledger.infrastructure.audit.lineage import audited_run, lineage_runs
from runledger.infrastructure.audit.stored_events import logged_events
from runledger.infrastructure.audit.summaries import summarise
from runledger.infrastructure.runtime import StoreRuntime


def check_flag(name: str, value: object) -> bool:
    """An audit switch: exactly True or False."""
    if not isinstance(value, bool):
        raise InvalidAuditArgumentError(name=name, expected="true or false")
    return value


def check_as_of(value: object, head: int) -> int | None:
    """A log position to stop at (at most the log's ``head``), or None for the whole log."""
    if value is not None and not is_count(value):
        raise InvalidAuditArgumentError(name="as_of", expected="a non-negative integer or None")
    if value is not None and value > head:
        raise AsOfBeyondLogError(as_of=value, head=head)
    return value


def audit_trail(
    runtime: StoreRuntime, run_id: str, *, lineage: bool = False, as_of: int | None = None
) -> AuditTrail:
    """Every event of the run (with ``lineage``, of its ancestors and descendants too) up to
    position ``as_of``, each with what it changed."""
    with_lineage = check_flag("lineage", lineage)
    up_to = check_as_of(as_of, runtime.storage.max_position())
    run = audited_run(runtime, run_id)
    runs = lineage_runs(runtime, run) if with_lineage else [run.run_id]
    entries = [
        AuditEntry(
            position=event.position,
            recorded_at=event.recorded_at,
            wire_name=event.wire_name,
            run_id=event.payload["run_id"],
            aggregate_id=event.aggregate_id,
            version=event.version,
            actor=event.actor,
            summary=summarise(event.wire_name, event.payload),
        )
        for event in logged_events(runtime.storage, runtime.log, runs, up_to=up_to)
    ]
    return AuditTrail(
        run_id=run.run_id, lineage=with_lineage, as_of=up_to, runs=runs, entries=entries
    )
