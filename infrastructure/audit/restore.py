"""Retention's way back: put a pruned run tree back from its bundle (DESIGN.md "Retention").

A bundle is taken only when it verifies on its own (``verify_bundle``) and is the one its
tree's tombstone names: the same SHA-256, runs, event count, last versions and chain heads.
Its events go back at new log positions with their original versions and stored payloads, in
one transaction that also lifts the storage's refusal of the tree's aggregate ids and records
``run-tree.restored`` on the tombstone (``storage.restore_tree``); then the read models take
them, and the tree's events must re-project to the digests the bundle carries and its live
rows must be those a re-projection gives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import StoredEvent

from runledger.domain.errors import RestoreNotVerifiedError, RestoreRefusedError
from runledger.domain.packed_state import unpacked
from runledger.domain.ports import LogEntry
from runledger.domain.records import RestoredTree
from runledger.domain.run_tree_archives import RunTreeArchive, run_tree_lookup_key
from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.serialisation import event_index
from runledger.domain.values import SYSTEM
from runledger.infrastructure.audit.bundle import bundle_path
from runledger.infrastructure.audit.bundle_format import HEADS, entry_of
from runledger.infrastructure.audit.reprojection import Reprojection, reproject
from runledger.infrastructure.audit.run_verification import first_difference
from runledger.infrastructure.audit.stored_events import (
    aggregate_text,
    log_entry,
    run_notifications,
)
from runledger.infrastructure.audit.verify_bundle import checked_bundle
from runledger.infrastructure.collector import collector_paused
from runledger.infrastructure.commits.executor import forget_cached
from runledger.infrastructure.commits.mapper import LedgerStoredEvent
from runledger.infrastructure.runtime import StoreRuntime, default_projections
from runledger.infrastructure.storage.archived import (
    TOMBSTONE_TOPICS,
    GuardMovedError,
    TreeRestoral,
)
from runledger.projections.base import Key, Row, Table, ViewReader


@dataclass(frozen=True)
class ArchiveBundle:
    """A verified bundle, parsed: what a restore compares with the tombstone and puts back."""

    path: Path
    sha256: str
    root_run_id: str
    run_ids: list[str]
    event_count: int
    events: list[dict[str, Any]]
    aggregates: dict[str, dict[str, Any]]
    """Each aggregate's last version and chain head, as a tombstone records them."""
    digests: dict[str, Any]
    verified: Reprojection
    """The re-projection of its events, at the positions it gives them, that gave its
    digests (``verify_bundle``)."""


def read_archive_bundle(bundle: object) -> ArchiveBundle:
    """The bundle at ``bundle``, which must verify on its own before anything is compared."""
    path = bundle_path(bundle, RestoreRefusedError)
    try:
        data = path.read_bytes() if path.is_file() else None
    except OSError as error:
        raise RestoreRefusedError(
            bundle=str(path), reason=f"it cannot be read ({error.strerror or error})"
        ) from None
    if data is None:
        reason = "it is a folder, not a bundle file" if path.is_dir() else "there is no such file"
        raise RestoreRefusedError(bundle=str(path), reason=reason)
    # The bytes verified are the bytes restored: one read, not one to verify and another.
    verdict, verified = checked_bundle(data)
    if not verdict.ok or verified is None:
        raise RestoreRefusedError(
            bundle=str(path), reason=f"it does not verify ({verdict.problem}: {verdict.detail})"
        )
    lines = data.rstrip(b"\n").split(b"\n")
    header = orjson.loads(lines[0])
    heads = header[HEADS]
    return ArchiveBundle(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        root_run_id=header["run_id"],
        run_ids=list(header["runs"]),
        event_count=header["events"],
        events=[orjson.loads(line)["event"] for line in lines[1:-1]],
        aggregates={
            aggregate: {"version": span["last"], "chain_head": heads[aggregate]}
            for aggregate, span in header["aggregates"].items()
        },
        digests=orjson.loads(lines[-1])["read_models"],
        verified=verified,
    )


def matching_tombstone(runtime: StoreRuntime, bundle: ArchiveBundle) -> RunTreeArchive:
    """The tombstone of the bundle's tree that names this bundle, checked field by field."""
    app = runtime.app
    root = bundle.root_run_id
    archives = [
        archive
        for archive_id in runtime.storage.originator_ids_by_key(run_tree_lookup_key(root))
        if (archive := app.load(RunTreeArchive, archive_id)) is not None
    ]
    named = [archive for archive in archives if archive.bundle_sha256 == bundle.sha256]
    if not named:
        raise RestoreRefusedError(
            bundle=str(bundle.path),
            reason=f"no tombstone of run tree {root} names a bundle with SHA-256 {bundle.sha256}",
        )
    [archive] = named
    if archive.is_restored:
        raise RestoreRefusedError(
            bundle=str(bundle.path), reason=f"run tree {root} was restored from it already"
        )
    mismatch = _mismatch(archive, bundle)
    if mismatch is not None:
        raise RestoreRefusedError(
            bundle=str(bundle.path), reason=f"it does not match its tombstone ({mismatch})"
        )
    return archive


def _mismatch(archive: RunTreeArchive, bundle: ArchiveBundle) -> str | None:
    if sorted(archive.run_ids) != sorted(bundle.run_ids):
        return "the runs differ"
    if archive.events != bundle.event_count:
        return f"the tombstone counts {archive.events} events, the bundle {bundle.event_count}"
    for aggregate_id in sorted(archive.aggregates.keys() | bundle.aggregates.keys()):
        if archive.aggregates.get(aggregate_id) != bundle.aggregates.get(aggregate_id):
            return f"aggregate {aggregate_id} ends at another version or chain head"
    return None


def tree_events(runtime: StoreRuntime, bundle: ArchiveBundle) -> list[StoredEvent]:
    """The bundle's events as the log stores them, with their original versions and payloads
    (their index columns come from the events themselves). Earlier tombstones of the tree are
    in the bundle too, but a prune leaves them in the log: they are not put back."""
    mapper = runtime.app.mapper
    stored: list[StoredEvent] = []
    for event in bundle.events:
        if event["wire_name"] in TOMBSTONE_TOPICS:
            continue
        plain = StoredEvent(
            originator_id=UUID(event["aggregate_id"]),
            originator_version=event["version"],
            topic=event["wire_name"],
            state=orjson.dumps(event["state"]),
        )
        # Decoded (and so checked) for its index columns alone: encoding it again packed a
        # payload only to throw it away, a seventh of a big tree's restore.
        run_id, lookup_key = event_index(mapper.to_domain_event(plain))
        stored.append(
            LedgerStoredEvent(
                originator_id=plain.originator_id,
                originator_version=plain.originator_version,
                topic=plain.topic,
                state=plain.state,
                run_id=run_id,
                lookup_key=lookup_key,
            )
        )
    return stored


def _check_absent(runtime: StoreRuntime, bundle: ArchiveBundle) -> None:
    for run_id in bundle.run_ids:
        if runtime.app.load(Run, run_aggregate_id(run_id)) is not None:
            raise RestoreRefusedError(
                bundle=str(bundle.path), reason=f"run {run_id} is in the store"
            )


def restore_runs(runtime: StoreRuntime, bundle: object) -> RestoredTree:
    """Put the tree the bundle holds back into the store (see the module docstring)."""
    # The bundle's parsed events and its verifying re-projection stay alive to the end, and
    # every collection on the way walked them (``collector``).
    with collector_paused():
        return _restore_runs(runtime, bundle)


def _restore_runs(runtime: StoreRuntime, bundle: object) -> RestoredTree:
    archive_bundle = read_archive_bundle(bundle)
    archive = matching_tombstone(runtime, archive_bundle)
    _check_absent(runtime, archive_bundle)
    events = tree_events(runtime, archive_bundle)
    app = runtime.app
    archive.restore(
        events=len(events), bundle=str(archive_bundle.path), actor=SYSTEM, now=app.now()
    )
    [restored] = archive.collect_events()
    restoral = TreeRestoral(
        events=events, archive_id=archive.id, restored=app.mapper.to_stored_event(restored)
    )
    try:
        runtime.storage.restore_tree(restoral)  # type: ignore[attr-defined]
    except GuardMovedError:
        raise RestoreRefusedError(
            bundle=str(archive_bundle.path),
            reason=f"run tree {archive_bundle.root_run_id} was restored or pruned again meanwhile",
        ) from None
    forget_cached(app, [*restoral.aggregate_ids, archive.id])
    runtime.projector.catch_up()
    check_restored(runtime, archive_bundle)
    return RestoredTree(
        root_run_id=archive_bundle.root_run_id,
        run_ids=archive_bundle.run_ids,
        events=len(events),
        bundle=str(archive_bundle.path),
        bundle_sha256=archive_bundle.sha256,
        restored_at=restored.timestamp,
    )


def check_restored(runtime: StoreRuntime, bundle: ArchiveBundle) -> None:
    """The tree's events, read back from the log, re-project to the bundle's digests, and the
    live rows of the tree are what a re-projection of them gives.

    The digests are of the events at the positions the bundle gives them (a row may hold the
    position it was created at, as the runs list does): what is compared is that every event
    came back as the bundle holds it. The live rows are compared with that same
    re-projection, its position columns (``Table.positions``) moved to the log's new
    positions: a second re-projection at those positions gave the same rows, and was a sixth
    of a restore (py-spy, R2 on PostgreSQL)."""
    archived_at = {
        (event["aggregate_id"], event["version"]): event["position"] for event in bundle.events
    }
    read_back = [log_entry(n) for n in run_notifications(runtime.storage, bundle.run_ids)]
    as_archived: list[LogEntry] = []
    moved: dict[int, int] = {}
    others: list[LogEntry] = []
    for entry in read_back:
        key = (aggregate_text(entry.originator_id), entry.originator_version)
        position = archived_at.get(key)
        if position is None:
            others.append(entry)
            continue
        moved[position] = entry.position
        as_archived.append(entry._replace(position=position))
    as_archived.sort(key=lambda entry: entry.position)
    verified = (
        bundle.verified if _as_bundled(as_archived, bundle) else _check_digests(as_archived, bundle)
    )
    kept = set(runtime.projection_names())
    projections = verified.projections
    fresh: ViewReader = _AtNewPositions(verified.reader(), moved)
    if any(entry.topic in projection.topics for entry in others for projection in projections):
        # An event of the tree that the bundle does not hold, and a read model takes, would
        # change its rows (none does today: a restore's own record is no read model's):
        # re-project everything read back, at the positions it has now.
        fresh = reproject(read_back, projections).reader()
    for projection in projections:
        if projection.name not in kept:
            continue
        difference = first_difference(
            projection, bundle.run_ids, fresh, runtime.reader(projection.name)
        )
        if difference is not None:
            raise RestoreNotVerifiedError(
                bundle.root_run_id,
                str(bundle.path),
                f"the live {difference.model} row {difference.key} of table "
                f"{difference.table} differs from a re-projection",
            )


def _as_bundled(entries: list[LogEntry], bundle: ArchiveBundle) -> bool:
    """Whether the events read back are the bundle's, field for field and in its order.

    ``verify_bundle`` re-projected exactly those to the bundle's digests, and a re-projection
    depends on nothing but its entries, so equal entries need no second one."""
    if len(entries) != len(bundle.events):
        return False
    return all(
        entry.position == bundled.position
        and entry.topic == bundled.topic
        and aggregate_text(entry.originator_id) == bundled.originator_id
        and entry.originator_version == bundled.originator_version
        and _same_payload(unpacked(entry.state), bundled.state)
        for entry, bundled in zip(entries, map(entry_of, bundle.events), strict=True)
    )


def _same_payload(stored: bytes, bundled: bytes) -> bool:
    """Whether a payload read back is the bundle's. A restored event is stored as the bundle
    holds it, keys in canonical order; an earlier tombstone of the tree stayed in the log as
    it was written, its keys in field order. So a tree pruned a second time re-projected all
    its events here again (a tenth of its restore, py-spy), though only a tombstone's key order
    differed. Equal bytes once both are written with sorted keys are the same values, and
    ``verify_bundle`` re-projecting the bundle's canonical payloads to the digests of the
    stored ones already holds the projections to the key order not mattering."""
    if stored == bundled:
        return True
    try:
        return orjson.dumps(orjson.loads(stored), option=orjson.OPT_SORT_KEYS) == bundled
    except orjson.JSONDecodeError:
        return False


def _check_digests(entries: list[LogEntry], bundle: ArchiveBundle) -> Reprojection:
    reprojection = reproject(entries, default_projections())
    digests = reprojection.digests()
    for name in sorted(digests):
        if digests[name] != bundle.digests.get(name):
            raise RestoreNotVerifiedError(
                bundle.root_run_id,
                str(bundle.path),
                f"its events re-project to another {name} digest than the bundle's",
            )
    return reprojection


class _AtNewPositions:
    """A re-projection's rows with their position columns (``Table.positions``) moved from
    the positions a bundle gave its events to those the log gave them on restore (a value
    not among them, kept): what re-projecting them where they lie now gives. Only the reads
    ``first_difference`` makes, by run: a query on a position column is refused, as its
    values are those of the positions before."""

    def __init__(self, reader: ViewReader, moved: Mapping[int, int]) -> None:
        self._reader = reader
        self._moved = moved

    def _moved_row(self, table: Table, row: Row) -> Row:
        for name in table.positions:
            value = row[name]
            row[name] = self._moved.get(value, value)
        return row

    def _refuse_positions(self, table: Table, *names: str | None) -> None:
        if any(name in table.positions for name in names):
            raise ValueError(f"{table.name}: a query on a moved position column")

    def get(self, table: Table, key: Key) -> Row | None:
        self._refuse_positions(table, *table.key)
        row = self._reader.get(table, key)
        return None if row is None else self._moved_row(table, row)

    def scan(self, table: Table, **query: Any) -> list[Row]:
        """``ViewReader.scan``'s ``query``, passed on as given."""
        conditions = (*(query.get("equals") or {}), *(query.get("within") or {}))
        self._refuse_positions(table, *conditions, query.get("order_by"))
        return [self._moved_row(table, row) for row in self._reader.scan(table, **query)]

    def count(self, table: Table, *, equals: Mapping[str, Any] | None = None) -> int:
        self._refuse_positions(table, *(equals or {}))
        return self._reader.count(table, equals=equals)
