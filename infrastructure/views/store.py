"""Where projections keep their rows and tracking positions: the interface of a view store.

A view store commits a page of row changes for one or more projections together with their
new tracking positions in ONE transaction, and only if every projection is still at the
position the page was computed from: a page is never applied twice, even by two workers or
two embedded hosts racing on one database.

Each projection's rows live in **slots**: one set of physical tables per build, named by
the projection's version and the slot's number (``physical_name``, the one place that maps a
projection's logical ``Table`` to a physical table). A registry row per projection says which
slot is **active** (answers queries, takes live pages) and which one is **building** (a
blue/green rebuild beside it); switching is one transaction, so a query reads either the old
model or the new one, never a half-built one. A build holds the projection's lock row (owner
and lease), so two builds of one projection never run at once, across processes too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson
from eventsourcing.persistence import IntegrityError

from runledger.domain.packed_state import packed, unpacked
from runledger.infrastructure.storage.log_probes import LogProbe
from runledger.infrastructure.views.compact_text import compact, expanded
from runledger.projections.base import Key, Projection, Row, Table

EncodedRow = dict[str, Any]
"""A row as stored: JSON columns are text, so cached rows can never be mutated by accident."""

TableChanges = dict[Key, EncodedRow | None]
"""Primary key -> new encoded row, or None to delete it."""


SlotState = Literal["active", "building", "retired"]

LEGACY_SLOT = 0
"""The slot of tables written before slots existed: the logical names, unsuffixed."""

PACK_FROM = 256
"""The fewest bytes of JSON a ``packed`` column packs; shorter JSON is kept as its bytes, the
form ``packed`` gives JSON that packing would not shrink. In the bench history 17k of 18.6k
viewer revisions hold under 64 bytes, which zstd never shrank, at 2.4 µs each to find that
out; from 320 bytes on it kept 37 to 58 %, and 3 % of a 14.5 kB batch of session events."""


@dataclass(frozen=True)
class TrackingState:
    """One slot's tracking row: the projection's version built there, position, last error."""

    name: str
    version: int
    position: int
    last_error: str | None
    slot: int = LEGACY_SLOT
    state: SlotState = "active"
    tables: tuple[str, ...] = ()
    """The logical names of the slot's tables (the code that drops them may not know them)."""


@dataclass(frozen=True)
class Registry:
    """Which slot of a projection is active, which is building, and who holds its lock."""

    name: str
    active: TrackingState | None
    building: TrackingState | None
    lock_owner: str | None
    lock_expires: float | None


@dataclass(frozen=True)
class PageCommit:
    """One projection's share of a page: expected and new position, and its row changes."""

    projection: Projection
    expected_position: int
    new_position: int
    changes: Mapping[str, TableChanges]
    slot: TrackingState
    """The slot the page goes to; it commits only while the slot is still in its state."""
    previous: Mapping[str, Mapping[Key, EncodedRow]] = field(default_factory=dict)
    """Rows as committed before the page, for some of the changed keys (those the writer
    knew): a store that can update only the changed columns of such a row (``ViewStore.
    partial_updates``) leaves the indexes on its other columns, and an unchanged row, alone."""


class TrackingConflictError(IntegrityError):
    """Another writer moved a projection (or retired its slot) since this page was read;
    nothing was written."""

    def __init__(self, name: str, expected: int, actual: int) -> None:
        super().__init__(f"projection {name} is at {actual}, not {expected}")
        self.name = name
        self.expected = expected
        self.actual = actual


def encode_row(table: Table, row: Row, *, plain: bool = False) -> EncodedRow:
    """A row as stored (JSON columns as text, packed ones as ``packed_state`` bytes, compact
    ones as ``compact_text`` bytes), refusing missing or unknown columns. In a ``plain``
    store (``ViewStore.plain``) a packed column keeps its JSON bytes, the form ``packed``
    gives JSON it cannot shrink, and a compact column its text, the form a table written
    before the column was compact holds."""
    if row.keys() != table.column_set:
        missing = table.column_set - row.keys()
        extra = row.keys() - table.column_set
        raise ValueError(f"{table.name} row: missing {sorted(missing)}, unknown {sorted(extra)}")
    encoded = dict(row)
    for name in table.json_columns:
        text = orjson.dumps(encoded[name])
        if name not in table.packed_columns:
            encoded[name] = text.decode()
        else:
            encoded[name] = text if plain or len(text) < PACK_FROM else packed(text)
    for name in table.compact_columns:
        value = encoded[name]
        if value is not None:
            if type(value) is not str:
                msg = f"{table.name} row: {name} holds text, not {type(value).__name__}"
                raise ValueError(msg)
            if not plain:
                encoded[name] = compact(value)
    return encoded


def encode_changes(
    table: Table, changes: Mapping[Key, Row | None], *, plain: bool = False
) -> TableChanges:
    """A page's changes of ``table`` as stored (``encode_row``), by their stored keys."""
    stored: TableChanges = {}
    # A row's stored key is in its stored form already.
    compacted = table.compact_key and not plain
    for key, row in changes.items():
        if row is None:
            stored[encode_key(table, key, plain=plain)] = None
            continue
        stored_row = encode_row(table, row, plain=plain)
        stored[table.key_of(stored_row) if compacted else key] = stored_row
    return stored


def encode_key(table: Table, key: Key, *, plain: bool = False) -> Key:
    """A primary key as stored: what a store's rows, deletes and fetches are keyed by (a
    ``plain`` store's: the key itself)."""
    if plain or not table.compact_key:
        return key
    compacts = table.compact_columns
    return tuple(
        compact(value) if name in compacts and type(value) is str else value
        for name, value in zip(table.key, key, strict=True)
    )


def decode_key(table: Table, key: Sequence[Any]) -> list[Any]:
    """A primary key as stored, as the row's: what a difference or a report names."""
    if not table.compact_key:
        return list(key)
    compacts = table.compact_columns
    return [
        expanded(value) if name in compacts and type(value) is bytes else value
        for name, value in zip(table.key, key, strict=True)
    ]


def comparable(value: Any, compact_text: bool = False) -> Any:
    """A stored value, a packed one as the JSON text it holds and a compact one
    (``compact_text``: the column's kind says which) as its text: how two copies compare as
    stored, whichever of them packs the column, and whatever zstd made of it."""
    if type(value) is not bytes:
        return value
    return expanded(value) if compact_text else unpacked(value).decode()


def comparable_values(table: Table, values: Sequence[Any]) -> list[Any]:
    """A row as stored, its values in column order, each one ``comparable``."""
    compacts = table.compact_columns
    return [
        comparable(value, name in compacts)
        for name, value in zip(table.column_names, values, strict=True)
    ]


def decode_row(table: Table, row: dict[str, Any]) -> Row:
    """Decode a row as stored, in place (callers pass a fresh dict of their own)."""
    for name in table.json_columns:
        value = row[name]
        if value is not None:
            # A packed column's bytes are unpacked first (``UnpackError`` for bytes in
            # neither of ``packed_state``'s forms); a JSON column holds the text.
            row[name] = orjson.loads(unpacked(value) if type(value) is bytes else value)
    for name in table.compact_columns:
        value = row[name]
        # Bytes are a stored form (``CompactTextError`` for bytes of none); text is itself,
        # as a table written before the column was compact holds it.
        if type(value) is bytes:
            row[name] = expanded(value)
    for name in table.bool_columns:
        if row[name] is not None:
            row[name] = bool(row[name])
    return row


class PageCommits(Protocol):
    """How a build commits its pages (``ViewStore.build_commits``): one page is under way
    at a time, and each commits after the one before it."""

    def send(self, pages: Sequence[PageCommit]) -> None:
        """Commit the page, or send its commit; the one before it must have settled."""

    def settle(self) -> None:
        """Wait until the page under way committed; raise what its commit raised."""


@dataclass(frozen=True)
class PageRows:
    """One projection's share of a page with its rows as the projection made them, for a
    committer that encodes them itself (``BuildCommits.send_rows``): what a ``PageCommit``
    holds, but the projection by name and no ``previous`` rows (every row is upserted)."""

    name: str
    expected_position: int
    new_position: int
    rows: Mapping[str, Mapping[Key, Row | None]]
    slot: TrackingState

    def commit(self, projection: Projection, *, plain: bool) -> PageCommit:
        """The page as a view store commits it."""
        tables = {table.name: table for table in projection.tables}
        changes = {
            name: encode_changes(tables[name], rows, plain=plain)
            for name, rows in self.rows.items()
        }
        return PageCommit(projection, self.expected_position, self.new_position, changes, self.slot)


class BuildCommits(PageCommits, Protocol):
    """A build's page commits that may also take pages unencoded (``PageRows``)."""

    def takes_rows(self) -> bool:
        """Whether the next page may go to ``send_rows``."""

    def send_rows(self, pages: Sequence[PageRows]) -> None:
        """Send the page's commit, its rows encoded where it commits; as ``send``."""


class ViewStore(ABC):
    """Tables and tracking of every projection on one backend."""

    partial_updates: bool = False
    """Whether a page's ``previous`` rows are used: worth their encoding only where a write
    of the changed columns alone costs less than a whole row's (SQLite writes every index
    holding a column an ``UPDATE`` sets, changed or not)."""

    plain: bool = False
    """Whether rows are kept in their plain form (``encode_row``): ``packed`` columns as
    their JSON bytes, ``compact`` ones as their text. A scratch re-projection in memory, read
    once for its digests and thrown away, keeps them so: compressing revisions there was
    3.5 % of an export and offline verify, and compacting ids and times and expanding them
    again for the digests 9 % (py-spy, A2). Every reader's decoding takes either form; a
    ``plain`` store's readers compare a query's values with its rows as they are."""

    def __init__(self) -> None:
        self._active: dict[str, TrackingState] = {}
        self._owners: dict[str, str] = {}
        """Logical table name -> the projection that declares it."""

    @staticmethod
    def physical_name(table: Table | str, slot: TrackingState) -> str:
        """The physical table holding a logical table's rows in ``slot``: the one mapping."""
        name = table if isinstance(table, str) else table.name
        if slot.slot == LEGACY_SLOT:
            return name
        return f"{name}_v{slot.version}_{slot.slot}"

    def active_slot(self, table: Table) -> TrackingState:
        """The slot answering queries of ``table``, as this process last saw the registry."""
        return self._active[self._owners[table.name]]

    def _known(self, projection: Projection, active: TrackingState | None) -> None:
        for table in projection.tables:
            self._owners[table.name] = projection.name
        if active is not None:
            self._active[projection.name] = active

    @abstractmethod
    def ensure(self, projection: Projection) -> TrackingState:
        """The projection's active slot, created (empty, at the code's version) if it has none.

        A stored version other than the projection's is left as it is: the runtime decides
        whether to build the new version beside it (blue/green) or to wait for one.
        """

    @abstractmethod
    def registry(self, name: str) -> Registry:
        """The projection's registry row (empty for a projection never ensured)."""

    def refresh(self) -> dict[str, TrackingState]:
        """Take the active slots from the registry again (another process may have switched);
        returns every projection's active slot, by name.

        One read of all of them: writer processes that project the same log meet each
        other's commits all the time, and a read of each registry row apart cost a dozen
        round trips a meeting on PostgreSQL.
        """
        states = {state.name: state for state in self.tracking()}
        for name in list(self._active):
            active = states.get(name)
            if active is not None:
                self._active[name] = active
        return states

    @abstractmethod
    def begin_build(self, projection: Projection, *, restart: bool = False) -> TrackingState:
        """The projection's building slot: the one in progress at the code's version (resumed),
        or a new, empty one without secondary indexes. The caller holds the lock."""

    @abstractmethod
    def switch(self, projection: Projection, building: TrackingState) -> TrackingState | None:
        """Make ``building`` active and retire the active slot, in one transaction; returns
        the retired slot. Fails (``TrackingConflictError``) if ``building`` is not building."""

    @abstractmethod
    def drop_slot(self, slot: TrackingState) -> None:
        """Drop a retired (or abandoned building) slot's tables and tracking row."""

    @abstractmethod
    def retired_slots(self, name: str) -> list[TrackingState]:
        """The projection's retired slots whose tables are still there."""

    @abstractmethod
    def try_lock(self, name: str, owner: str, *, lease_seconds: float) -> str | None:
        """Take (or renew) the projection's build lock; None if taken, else the holder.

        A lock whose lease ran out, or whose holder is a process of this host that is gone,
        is taken over: a crashed build never blocks the next one for long.
        """

    @abstractmethod
    def unlock(self, name: str, owner: str) -> None:
        """Release the build lock if ``owner`` holds it."""

    def create_indexes(self, projection: Projection, slot: TrackingState) -> None:  # noqa: B027
        """Create the secondary indexes a new building slot left out."""

    def analyze(self, slots: Sequence[tuple[Projection, TrackingState]]) -> None:  # noqa: B027
        """Bring the planner's statistics of these projections' tables in these slots up to
        date, where the backend plans by them (PostgreSQL; SQLite's planner takes an index
        without them)."""

    @abstractmethod
    def tracking(self) -> list[TrackingState]:
        """Every projection's active slot."""

    @abstractmethod
    def fetch(self, table: Table, key: Key, slot: TrackingState) -> EncodedRow | None:
        """A committed row of the slot, encoded as stored."""

    @abstractmethod
    def commit(self, pages: Sequence[PageCommit]) -> None:
        """Apply all pages and move their positions atomically, or raise
        TrackingConflictError (and write nothing) if any slot moved or changed state."""

    @abstractmethod
    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        """Move the pages' positions and write their rows on ``cursor``, in the transaction
        that inserts the events they project (the storage commits it; memory passes None).

        False when a projection moved meanwhile, having written no rows (SQLite may have
        moved some slots: the caller rolls back to before the call); on PostgreSQL the
        compare-and-set runs on the server and fails the statement instead (see
        ``SameCommit``: the storage then commits the events without the views).
        """

    @abstractmethod
    def record_error(self, slot: TrackingState, error: str | None) -> None:
        """Note why a slot's projection stopped (None clears it), keeping its position."""

    @abstractmethod
    def reader(self, slots: Mapping[str, TrackingState] | None = None) -> ViewReaderBase:
        """Read access to committed rows: of the active slots, or of the given ones by name."""

    @abstractmethod
    def stream_rows(self, table: Table, slot: TrackingState) -> Iterator[tuple[Any, ...]]:
        """Every row of the slot's table as stored, values in column order, a batch at a
        time (inside ``consistent`` on the snapshot's connection)."""

    @abstractmethod
    def raw_rows(self, name: str, slot: TrackingState) -> list[EncodedRow] | None:
        """Every row of the slot's table with logical ``name`` as stored, or None if absent:
        for comparing with a slot of another version, whose columns this code may not know."""

    def consistent(self) -> AbstractContextManager[None]:
        """Reads on this thread inside the block see one snapshot of the views."""
        return nullcontext()

    def reached_probe(self, name: str, at_least: int) -> LogProbe | None:
        """For a process that waits for another one to project: a look, carried before a
        query's first read, that finds (returns a row) unless ``name``'s active views stand
        at the log's head and at ``at_least``, with no error; None where no process waits
        for another (memory, SQLite)."""
        del name, at_least
        return None

    def moved(self, probe: LogProbe) -> bool:
        """Whether ``probe`` found the views possibly behind, running it now (outside
        ``probing``) if no read carried it. Here it cannot run: True, the usual way."""
        del probe
        return True

    def probing(self, probe: LogProbe) -> AbstractContextManager[None]:
        """Inside the block, this thread's next read of the views carries ``probe`` in its
        round trip and raises ``LogMovedError`` if it finds the log moved
        (``storage.log_probes``). Here no read carries it: the caller asks ``moved``."""
        del probe
        return nullcontext()

    def build_commits(self) -> AbstractContextManager[PageCommits | None]:
        """How a build commits its pages, where the backend has a way that lets the build
        go on while the database works (PostgreSQL's server writes a page while the build
        projects the next; SQLite's checkpoints run on a thread of their own); None: as a
        live catch-up does (``commit``)."""
        return nullcontext()

    def close(self) -> None:  # noqa: B027 - optional hook; the in-memory store holds nothing
        """Release connections."""


@dataclass(frozen=True, slots=True)
class Scan:
    """One scan of a view table, as ``ViewReader.scan`` and ``count`` ask for it."""

    table: Table
    equals: Mapping[str, Any]
    within: Mapping[str, Collection[Any]]
    """Column -> the values it may hold (``column IN values``; none matches an empty one)."""
    order_by: str | None = None
    descending: bool = False
    after: Any = None
    """With ``order_by``, only rows whose ``order_by`` value lies beyond it (keyset paging)."""
    limit: int | None = None


def _could_be_stored(table: Table, values: Mapping[str, Any]) -> bool:
    """Whether each value has its column's type, so that some stored row could hold it.

    A query's argument goes into these conditions as the host gave it: a list as a run id
    must find nothing, not reach the backend (unhashable in memory, unbindable in SQL).
    """
    kinds = table.kinds
    return all(_storable(kinds.get(column), value) for column, value in values.items())


def _storable(kind: str | None, value: Any) -> bool:
    """Whether a column of ``kind`` could hold ``value`` (``_could_be_stored``)."""
    if kind in ("text", "compact"):
        return isinstance(value, str)
    if kind == "int":
        return type(value) is int and -(2**63) <= value < 2**63
    return True


def _equals_as_stored(table: Table, equals: Mapping[str, Any], *, plain: bool) -> Mapping[str, Any]:
    """A scan's ``equals`` as stored: a compact column's text as its stored form."""
    compacts = table.compact_columns.intersection(equals)
    if plain or not compacts:
        return equals
    return {name: compact(v) if name in compacts else v for name, v in equals.items()}


def _within_as_stored(
    table: Table, within: Mapping[str, Collection[Any]], *, plain: bool
) -> Mapping[str, Collection[Any]]:
    """A scan's ``within`` as stored: values no row could hold left out (they match
    nothing, and a backend would refuse to compare them: ``bytea = smallint``), a compact
    column's text as its stored form."""
    kinds = table.kinds
    stored: dict[str, Collection[Any]] = {}
    for name, values in within.items():
        kind = kinds.get(name)
        kept = [value for value in values if _storable(kind, value)]
        compacted = not plain and name in table.compact_columns
        stored[name] = [compact(value) for value in kept] if compacted else kept
    return stored


class ViewReaderBase(ABC):
    """What every backend's reader shares: the query arguments as a ``Scan``, and decoding."""

    plain: bool = False
    """Whether the rows read are in their plain form (``ViewStore.plain``)."""

    @abstractmethod
    def _get(self, table: Table, key: Key) -> EncodedRow | None: ...

    @abstractmethod
    def _scan(self, scan: Scan) -> Sequence[EncodedRow]:
        """The rows the scan selects, encoded as stored, in its order."""

    @abstractmethod
    def _count(self, scan: Scan) -> int:
        """How many rows the scan's conditions select."""

    def get(self, table: Table, key: Key) -> Row | None:
        """The committed row with this primary key, decoded."""
        if not _could_be_stored(table, dict(zip(table.key, key, strict=True))):
            return None
        row = self._get(table, encode_key(table, tuple(key), plain=self.plain))
        return None if row is None else decode_row(table, row)

    def scan(
        self,
        table: Table,
        *,
        equals: Mapping[str, Any] | None = None,
        within: Mapping[str, Collection[Any]] | None = None,
        order_by: str | None = None,
        descending: bool = False,
        after: Any = None,
        limit: int | None = None,
    ) -> list[Row]:
        """Committed rows, decoded (see ``projections.base.ViewReader.scan``)."""
        if equals and not _could_be_stored(table, equals):
            return []
        if order_by in table.compact_columns:
            msg = f"{table.name}.{order_by} is compact: its stored order is not its text's"
            raise ValueError(msg)
        equals = _equals_as_stored(table, equals or {}, plain=self.plain)
        within = _within_as_stored(table, within or {}, plain=self.plain)
        rows = self._scan(Scan(table, equals, within, order_by, descending, after, limit))
        return [decode_row(table, row) for row in rows]

    def count(self, table: Table, *, equals: Mapping[str, Any] | None = None) -> int:
        """How many committed rows hold the ``equals`` values."""
        if equals and not _could_be_stored(table, equals):
            return 0
        stored = _equals_as_stored(table, equals or {}, plain=self.plain)
        return self._count(Scan(table, stored, {}))
