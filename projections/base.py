"""What every projection is: pure event -> view-change logic over keyed tables.

A projection declares its tables and applies one event at a time through a ``ViewWriter``
(get/put/delete by primary key only, so a runner can batch a whole page of changes into one
transaction). Queries read committed rows through a ``ViewReader``. Backends for memory,
SQLite and PostgreSQL live in ``infrastructure``; nothing here touches a database.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol
from uuid import UUID

ColumnType = Literal["text", "int", "bool", "json", "packed", "compact"]
"""``json`` holds a JSON value as its text; ``packed`` one kept packed (``domain.packed_state``:
zstd against the log's dictionary), for large values written once and read seldom, which a
backend would otherwise store as they are (PostgreSQL compresses only rows over 2 kB).
``compact`` holds text as ``text`` does, stored as bytes where it is an id or a time the
domain makes (``infrastructure.views.compact_text``): for the ids and times of tables with a
row per message or follow-up. Its stored order is not the text's, so no query orders by it."""
Row = dict[str, Any]
Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ProjectedEvent:
    """A stored event as projections see it: decoded JSON, no domain objects.

    ``data`` is the stored event state: ``timestamp`` (ISO-8601 text), ``actor``
    ({type, id}), ``run_id`` and the event's own fields (DESIGN.md catalogue).
    """

    position: int
    wire_name: str
    aggregate_id: UUID | str
    """As stored (a UUID, or its hex text on SQLite): projections key rows by natural ids."""
    version: int
    data: Mapping[str, Any]

    @property
    def recorded_at(self) -> str:
        value: str = self.data["timestamp"]
        return value

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)


@dataclass(frozen=True)
class Table:
    """A view table: typed columns, a primary key and optional secondary indexes.

    ``owner`` names the column holding the run a row belongs to, or is None for rows that are
    no run's (an audit compares a run's rows by it). ``session_order`` is ``(session column,
    order column)`` where rows are numbered across a whole session: that number depends on
    other runs' rows too, so an audit of one run compares the order, not the numbers.
    """

    name: str
    columns: tuple[tuple[str, ColumnType], ...]
    key: tuple[str, ...]
    indexes: tuple[tuple[str, ...], ...] = ()
    owner: str | None = field(kw_only=True)
    dropped_indexes: tuple[tuple[str, ...], ...] = field(default=(), kw_only=True)
    """Indexes an earlier release declared and no query needs: a store drops them on open."""
    clustered: bool = field(default=False, kw_only=True)
    """Rows are small and found by their key: a backend that can keeps each row in its key's
    b-tree (SQLite ``WITHOUT ROWID``), so a new row writes one b-tree, not a table and its
    key's index. Left off where rows may be large (JSON, long text), which SQLite would then
    spill to overflow pages beyond a quarter of a page, or where a range read relies on rows
    lying together in insertion order."""
    session_order: tuple[str, str] | None = field(default=None, kw_only=True)
    cached: bool = field(default=True, kw_only=True)
    """Whether the projector keeps the rows it writes here in its row cache. False for a
    table whose rows its projection only writes, never gets back while projecting (a run's
    viewer revisions, a scope's change log): one such row or more a command, each cached for
    nothing, then evicted, and held meanwhile by the collector. A projection that does get
    one reads it from the store."""
    positions: tuple[str, ...] = field(default=(), kw_only=True)
    """The ``int`` columns holding the log position of an event the row came from (a run's
    creation): the same events at other positions give the same rows but for these. A
    restore checks its live rows against the re-projection that verified its bundle, at the
    positions the bundle gives the events, with these columns moved to the log's new ones."""
    column_names: tuple[str, ...] = field(init=False)
    kinds: Mapping[str, ColumnType] = field(init=False, repr=False)
    """Column name -> its kind."""
    column_set: frozenset[str] = field(init=False, repr=False)
    json_columns: frozenset[str] = field(init=False)
    """The columns holding JSON values, packed ones included."""
    packed_columns: frozenset[str] = field(init=False)
    compact_columns: frozenset[str] = field(init=False)
    compact_key: bool = field(init=False)
    """Whether a column of the key is ``compact``: its stored key is not the row's."""
    bool_columns: frozenset[str] = field(init=False)
    _key_getter: Callable[[Mapping[str, Any]], Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = tuple(name for name, _ in self.columns)
        object.__setattr__(self, "column_names", names)
        object.__setattr__(self, "kinds", dict(self.columns))
        object.__setattr__(self, "column_set", frozenset(names))
        object.__setattr__(
            self,
            "json_columns",
            frozenset(name for name, kind in self.columns if kind in ("json", "packed")),
        )
        packed = frozenset(name for name, kind in self.columns if kind == "packed")
        object.__setattr__(self, "packed_columns", packed)
        compact = frozenset(name for name, kind in self.columns if kind == "compact")
        object.__setattr__(self, "compact_columns", compact)
        object.__setattr__(self, "compact_key", bool(compact.intersection(self.key)))
        object.__setattr__(
            self, "bool_columns", frozenset(name for name, kind in self.columns if kind == "bool")
        )
        getter = operator.itemgetter(*self.key)
        single = len(self.key) == 1
        object.__setattr__(self, "_key_getter", (lambda row: (getter(row),)) if single else getter)
        named = (
            *self.key,
            *sum(self.indexes, ()),
            *(() if self.owner is None else (self.owner,)),
            *(self.session_order or ()),
            *self.positions,
        )
        missing = [name for name in named if name not in names]
        if missing:
            raise ValueError(f"table {self.name} names unknown columns: {missing}")
        if any(self.kinds[name] != "int" for name in self.positions):
            raise ValueError(f"table {self.name}: a position column holds an int")

    def key_of(self, row: Mapping[str, Any]) -> Key:
        key: Key = self._key_getter(row)
        return key


class ViewWriter(Protocol):
    """Keyed access to a projection's tables while one page of events is applied."""

    def get(self, table: Table, key: Key) -> Row | None:
        """The row with this primary key as of the events applied so far.

        A shallow copy: set a new value for a JSON column rather than mutating the list or
        dict it holds, which may be shared with rows already written.
        """
        ...

    def put(self, table: Table, row: Row) -> None:
        """Insert or replace the row (every column present); the view now owns ``row``."""
        ...

    def delete(self, table: Table, key: Key) -> None: ...


class ViewReader(Protocol):
    """Read access to committed view rows, for queries."""

    def get(self, table: Table, key: Key) -> Row | None: ...

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
        """Rows matching ``equals`` (and ``column IN values`` for ``within``), ordered by
        ``order_by``; with ``after``, only rows whose ``order_by`` value is beyond it."""
        ...

    def count(self, table: Table, *, equals: Mapping[str, Any] | None = None) -> int: ...


class Projection(Protocol):
    """A named, versioned read model built only from the event log."""

    name: ClassVar[str]
    version: ClassVar[int]
    same_rows_since: ClassVar[int | None]
    """The earliest version whose rows this version's equal value for value, or None when
    they are this version's own. A version that changes only how rows are stored (a column
    kept packed) keeps its rows: its digest stays that version's (``rows_version``), so
    bundles digested since then still verify."""
    tables: ClassVar[Sequence[Table]]
    topics: ClassVar[frozenset[str]]
    """Wire names this projection consumes; it still tracks past every other event."""
    rebuild_weight: ClassVar[int]
    """Relative cost of replaying it (measured with cProfile on generated histories), so a
    parallel rebuild spreads its projections evenly over its processes."""

    def apply(self, event: ProjectedEvent, view: ViewWriter) -> None:
        """Change the view for one event. Deterministic: times come from the event only."""
        ...


def rows_version(projection: Projection) -> int:
    """The version whose rows the projection's are (``Projection.same_rows_since``)."""
    return projection.same_rows_since or projection.version


Handler = Callable[[ProjectedEvent, ViewWriter], None]
"""One event's change to a view."""


class HandledProjection:
    """A projection that changes its view with one handler per consumed wire name.

    Subclasses set ``handlers``; ``topics`` follows from it.
    """

    handlers: ClassVar[Mapping[str, Handler]]
    topics: ClassVar[frozenset[str]]
    rebuild_weight: ClassVar[int] = 1
    same_rows_since: ClassVar[int | None] = None

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.topics = frozenset(cls.handlers)

    def apply(self, event: ProjectedEvent, view: ViewWriter) -> None:
        """Change the view for one event of ``topics``."""
        handler = self.handlers.get(event.wire_name)
        if handler is not None:
            handler(event, view)
