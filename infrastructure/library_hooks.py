"""Every part of the eventsourcing library that runledger overrides, calls or reads beyond its
documented use: private methods, internal attributes, and public methods replaced to change
what the library does inside its own calls.

The dependency pin (``eventsourcing>=9.5.6,<9.6``) is no guard against a patch release that
renames one of them. ``tests/unit/test_library_hooks.py`` checks each hook listed here against
the installed library, with the signature it had when it was listed, so an upgrade that moves
one fails there, by name, rather than somewhere in a commit path. A new hook belongs here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from eventsourcing.application import Application, Cache, Repository
from eventsourcing.domain import BaseAggregate
from eventsourcing.persistence import ListenNotifySubscription
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from eventsourcing.sqlite import (
    SQLiteAggregateRecorder,
    SQLiteApplicationRecorder,
    SQLiteConnectionPool,
    SQLiteDatastore,
)

HookKind = Literal["override", "call", "attribute"]
"""``override``: a subclass replaces the method, which the library calls; ``call``: we call
it; ``attribute``: we read, replace or set an attribute the library's ``__init__`` makes."""


@dataclass(frozen=True)
class LibraryHook:
    """One use of the library beyond its documented interface."""

    owner: type
    name: str
    kind: HookKind
    where: str
    """The runledger module that relies on it."""
    why: str


HOOKS: Final[tuple[LibraryHook, ...]] = (
    # -- domain ------------------------------------------------------------------------------
    LibraryHook(
        BaseAggregate,
        "_create",
        "call",
        "domain/*.py (each aggregate's create)",
        "An aggregate is created with a natural, name-based id and its own created-event "
        "class; the public constructor would draw a random id.",
    ),
    LibraryHook(
        Application,
        "construct_mapper",
        "override",
        "domain/application.py",
        "The application takes runledger's mapper (catalogue wire names, no module paths) "
        "from the wiring instead of reading topics from the environment.",
    ),
    LibraryHook(
        Application,
        "construct_recorder",
        "override",
        "domain/application.py",
        "The recorder is the store's own, built by the composition root, not one the library "
        "would build from environment variables.",
    ),
    LibraryHook(
        Application,
        "construct_snapshot_store",
        "override",
        "domain/application.py",
        "Snapshots go to the store's snapshot recorder, through runledger's mapper.",
    ),
    LibraryHook(
        Application,
        "construct_repository",
        "override",
        "domain/application.py",
        "The application's repository is ``PrunableRepository`` (domain/cached_aggregates.py), "
        "whose ``get`` fast-forwards a cached aggregate from its cached version itself, so an "
        "aggregate whose events a prune deleted is not found in any process that cached it.",
    ),
    LibraryHook(
        Repository,
        "_use_fastforward_lock",
        "call",
        "domain/cached_aggregates.py",
        "The library's per-aggregate fast-forward lock, taken as its own ``get`` takes it.",
    ),
    LibraryHook(
        Repository,
        "_disuse_fastforward_lock",
        "call",
        "domain/cached_aggregates.py",
        "Gives back the fast-forward lock, as the library's own ``get`` does.",
    ),
    # -- commits -----------------------------------------------------------------------------
    LibraryHook(
        Cache,
        "cache",
        "attribute",
        "infrastructure/commits/executor.py",
        "The repository cache's dict, for a membership test: whether an aggregate was seen "
        "(so it exists in the store). The cache offers only ``get``, which raises for a "
        "missing key and moves a found one in the LRU order.",
    ),
    # -- SQLite ------------------------------------------------------------------------------
    LibraryHook(
        SQLiteConnectionPool,
        "_create_connection",
        "override",
        "infrastructure/storage/sqlite.py",
        "Connections keep a statement cache large enough for a command's statements; the "
        "library's caches one.",
    ),
    LibraryHook(
        SQLiteDatastore,
        "pool",
        "attribute",
        "infrastructure/storage/sqlite.py",
        "Replaced by the statement-caching pool before anything connects; the datastore takes "
        "no pool class.",
    ),
    LibraryHook(
        SQLiteApplicationRecorder,
        "_insert_events",
        "override",
        "infrastructure/storage/sqlite.py",
        "The log's rows also carry the run and lookup-key index columns, and the insert runs "
        "in runledger's own transaction with the fences and the read-model step.",
    ),
    LibraryHook(
        SQLiteAggregateRecorder,
        "_insert_events",
        "call",
        "infrastructure/storage/sqlite.py",
        "Snapshots are inserted by the library after their ids are read as UUIDs.",
    ),
    LibraryHook(
        SQLiteApplicationRecorder,
        "insert_events_statement",
        "attribute",
        "infrastructure/storage/sqlite.py",
        "Replaced with the insert of the index columns, which the library's methods run.",
    ),
    LibraryHook(
        SQLiteApplicationRecorder,
        "select_max_notification_id_statement",
        "attribute",
        "infrastructure/storage/sqlite.py",
        "Replaced: the log's position column is named ``position``, not ``rowid``.",
    ),
    LibraryHook(
        SQLiteApplicationRecorder,
        "construct_create_table_statements",
        "override",
        "infrastructure/storage/sqlite.py",
        "The log's table has the index columns and their indexes.",
    ),
    # -- PostgreSQL --------------------------------------------------------------------------
    LibraryHook(
        PostgresAggregateRecorder,
        "_create_table",
        "override",
        "infrastructure/storage/postgres.py",
        "The schema is created first, under an advisory lock, so two processes opening a new "
        "database do not race on the catalogue.",
    ),
    LibraryHook(
        PostgresAggregateRecorder,
        "_insert_stored_events",
        "override",
        "infrastructure/storage/postgres.py",
        "Snapshots are inserted as column arrays (no composite row type is registered).",
    ),
    LibraryHook(
        PostgresAggregateRecorder,
        "sql_create_statements",
        "attribute",
        "infrastructure/storage/postgres.py",
        "Replaced with runledger's tables, which the library's ``_create_table`` runs.",
    ),
    LibraryHook(
        PostgresAggregateRecorder,
        "insert_events_statement",
        "attribute",
        "infrastructure/storage/postgres.py",
        "Replaced with the column-array insert.",
    ),
    LibraryHook(
        PostgresApplicationRecorder,
        "max_notification_id_statement",
        "attribute",
        "infrastructure/storage/postgres.py",
        "Replaced: the log's position column is named ``position``.",
    ),
    LibraryHook(
        PostgresApplicationRecorder,
        "channel_name",
        "attribute",
        "infrastructure/storage/postgres.py",
        "Set to the schema-qualified table, the channel every writer notifies and the key of "
        "the writers' lock.",
    ),
    LibraryHook(
        PostgresDatastore,
        "pool",
        "attribute",
        "infrastructure/storage/postgres.py",
        "The pool's ``conninfo`` and ``reconnect_timeout`` are set after construction (the "
        "library passes five connection parameters and no back-off), and its stats are read "
        "for metrics.",
    ),
    LibraryHook(
        PostgresDatastore,
        "get_connection",
        "override",
        "infrastructure/storage/postgres.py",
        "A thread that holds a connection gets it back from every library call, so its "
        "statements run in the transaction that holds its locks; faults become "
        "``StorageUnavailableError``.",
    ),
    LibraryHook(
        PostgresDatastore,
        "after_connect_func",
        "override",
        "infrastructure/storage/postgres.py",
        "Through a transaction-mode pooler (``pooler=transaction``) a new connection gets no "
        "session ``SET`` and no prepared statements; otherwise the library's callback stays.",
    ),
    LibraryHook(
        PostgresDatastore,
        "register_type_adapters",
        "override",
        "infrastructure/storage/postgres.py",
        "Nothing to register: rows travel as column arrays, so opening a store runs no query "
        "for composite types.",
    ),
    # -- memory ------------------------------------------------------------------------------
    LibraryHook(
        ListenNotifySubscription,
        "_recorder",
        "attribute",
        "infrastructure/storage/memory.py",
        "The memory subscription registers with the recorder it follows.",
    ),
    LibraryHook(
        ListenNotifySubscription,
        "_has_been_notified",
        "attribute",
        "infrastructure/storage/memory.py",
        "The event the library's pull loop waits on; the memory recorder sets it after each "
        "insert, as a NOTIFY would.",
    ),
)
