"""Event storage in PostgreSQL, shared by several host processes or machines."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import cached_property
from typing import Any, Final, ParamSpec, TypeVar, cast
from uuid import UUID

import psycopg
import psycopg_pool
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    InterfaceError,
    Notification,
    OperationalError,
    PersistenceError,
    StoredEvent,
    Subscription,
)
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from eventsourcing.utils import retry
from psycopg import Connection, Cursor
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, tuple_row
from psycopg.sql import SQL, Identifier, Literal

from runledger.domain.errors import StorageUnavailableError, StoreNotFoundError
from runledger.domain.ports import LogEntry
from runledger.infrastructure.commits.group_commit import GroupCommit
from runledger.infrastructure.commits.ports import (
    ArchivedAggregateError,
    Fence,
    IndexFence,
    SameCommit,
    VersionFence,
)
from runledger.infrastructure.databases import (
    MOVED_SQLSTATE,
    CommitRows,
    pipelined,
    psycopg_cause,
)
from runledger.infrastructure.storage.archived import (
    ARCHIVED_MESSAGE,
    ARCHIVED_SQLSTATE,
    ARCHIVED_TABLE,
    CREATED_TOPIC,
    TOMBSTONE_TOPICS,
    GuardMovedError,
    TreeChangedError,
    TreeRemoval,
    TreeRestoral,
    ViewsMovedError,
    ViewsWrite,
    created_in_tree,
    fenced_ids,
    same_tree,
)
from runledger.infrastructure.storage.base import (
    EVENTS_TABLE,
    LOG_COLUMNS,
    SNAPSHOTS_TABLE,
    FenceBrokenError,
    LogCondition,
    RecorderBackedStorage,
    SqlLogQueries,
    UuidOriginatorIds,
    as_uuid,
    fence_conditions,
    index_columns,
    index_fences,
)
from runledger.infrastructure.storage.binary_arrays import (
    BigintArray,
    BooleanArray,
    ByteaArray,
    IntegerArray,
    TextArray,
    UuidArray,
)
from runledger.infrastructure.storage.log_probes import LogProbe
from runledger.infrastructure.storage.recent_first_pool import recent_first
from runledger.infrastructure.storage.replicas import (
    WAL_AFTER_COMMIT,
    ReadPosition,
    ReplicaSet,
    WrittenPositions,
    lsn_of,
)
from runledger.infrastructure.storage.urls import (
    REDACTED,
    PostgresSettings,
    read_postgres_url,
    redact_url,
)
from runledger.infrastructure.telemetry import TELEMETRY

logger = logging.getLogger(__name__)

LOCK_TIMEOUT_SECONDS = 5
"""How long an insert waits for the events table lock before the attempt fails (and is retried)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _retried(func: Callable[_P, _R]) -> Callable[_P, _R]:
    # As the library's own reads: a dropped pooled connection is retried on a fresh one.
    decorated = retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)(func)
    return cast(Callable[_P, _R], decorated)


REFUSED: Final = "refused"
UNKNOWN_DATABASE: Final = "unknown database"
AUTHENTICATION_FAILED: Final = "authentication failed"
SERVER_FULL: Final = "server full (too many connections)"
SERVER_STARTING_OR_STOPPING: Final = "server starting up or shutting down"
CONNECTION_LOST: Final = "connection lost"
POOL_EXHAUSTED: Final = "pool exhausted"
TIMED_OUT: Final = "timed out"

_CAUSES_BY_SQLSTATE: Final = {
    "53300": SERVER_FULL,
    "3D000": UNKNOWN_DATABASE,
    "28000": AUTHENTICATION_FAILED,
    "28P01": AUTHENTICATION_FAILED,
    "57P01": CONNECTION_LOST,
    "57P02": CONNECTION_LOST,
    "57P03": SERVER_STARTING_OR_STOPPING,
}
SESSIONS_ENDED_SQLSTATES: Final = frozenset({"57P01", "57P02"})
"""The server ended the session (``pg_terminate_backend``, a shutdown, a crash): it ended
the pool's idle ones with it, most likely."""
# libpq reports connection failures without a SQLSTATE: its (English) messages decide.
_CAUSES_BY_MESSAGE: Final = (
    ("too many clients", SERVER_FULL),
    ("remaining connection slots are reserved", SERVER_FULL),
    ("too many connections", SERVER_FULL),
    ("password authentication failed", AUTHENTICATION_FAILED),
    ("no pg_hba.conf entry", AUTHENTICATION_FAILED),
    ("authentication failed", AUTHENTICATION_FAILED),
    ('role "', AUTHENTICATION_FAILED),
    ('database "', UNKNOWN_DATABASE),
    ("connection refused", REFUSED),
    ("no such file or directory", REFUSED),
    ("timeout expired", TIMED_OUT),
    ("timed out", TIMED_OUT),
    ("the database system is", SERVER_STARTING_OR_STOPPING),
)


def connection_fault(error: psycopg.Error) -> str | None:
    """The cause of a connection or server fault as hosts read it, or None for any other
    error (a broken constraint, a lock timeout, a deadlock: the library's retries own those)."""
    if isinstance(error, psycopg_pool.PoolTimeout):
        return POOL_EXHAUSTED
    if error.sqlstate is not None:
        return _CAUSES_BY_SQLSTATE.get(error.sqlstate)
    if not isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return None
    message = str(error).lower()
    for fragment, cause in _CAUSES_BY_MESSAGE:
        if fragment in message:
            return cause
    # Without a SQLSTATE the server never answered: the connection itself failed.
    return CONNECTION_LOST


def _detail(error: psycopg.Error, password: str) -> str:
    """The first line of libpq's or the server's own words, without its framing."""
    line = (str(error).strip().splitlines() or [""])[0]
    line = line.rpartition(" failed: ")[2].removeprefix("FATAL:").strip()
    return line.replace(password, REDACTED) if password else line


def unavailable_error(
    error: psycopg.Error, settings: PostgresSettings
) -> StorageUnavailableError | None:
    """``error`` as hosts read it when it is a connection or server fault of the server
    ``settings`` names (its cause, endpoint and the server's words, without the password);
    None for any other error."""
    fault = connection_fault(error)
    if fault is None:
        return None
    return StorageUnavailableError(fault, settings.endpoint, _detail(error, settings.password))


class ConnectionLostError(StorageUnavailableError, OperationalError):
    """A connection failed under a statement: the library's recorders retry such a call on a
    fresh connection, and only when their attempts run out does it reach the caller."""


class _ArrayRowsDatastore(PostgresDatastore):
    """The library's datastore, configured from a store URL, without its composite row types
    (rows travel as column arrays), whose connection faults are ``StorageUnavailableError``.

    A thread may *hold* one pooled connection (``holding``): until it lets go, every read and
    write of that thread goes through it, inside the transaction that holds its locks.
    """

    def __init__(self, settings: PostgresSettings, *, lock_timeout: int, schema: str) -> None:
        # Read by after_connect_func, which the library's constructor calls.
        self.settings = settings
        self._backends: set[int] = set()
        super().__init__(
            dbname=settings.dbname,
            host=settings.host,
            port=settings.port,
            user=settings.user,
            password=settings.password,
            # The library's "connect_timeout" is how long a call waits for a pooled connection.
            connect_timeout=settings.pool_timeout,
            idle_in_transaction_session_timeout=5,
            pool_size=settings.pool_size,
            max_overflow=settings.max_overflow,
            lock_timeout=lock_timeout,
            schema=schema,
        )
        # The library passes five parameters; the URL's others (sslmode, options, ...) and the
        # connect timeout reach libpq through the pool's conninfo.
        self.pool.conninfo = settings.conninfo
        recent_first(self.pool)
        # A slot whose reconnection keeps failing is given up after this, so a call after an
        # outage grows the pool afresh rather than waiting out the pool's doubling back-off.
        self.pool.reconnect_timeout = max(2.0 * settings.pool_timeout, settings.connect_timeout)
        self._held = threading.local()
        self.written = WrittenPositions(self._read_lsn)
        """Where this store's commits lie, in the WAL and in the log (read-your-writes)."""
        self.reads_wal_at_commit = bool(settings.replica_url)
        """Whether a commit reads its WAL position at once (a store that reads replicas
        needs it for nearly every query), or leaves it to the next ``written.current``."""

    def committed(self, wal_row: Any, positions: Sequence[int]) -> None:
        """Note a commit: its row of ``WAL_AFTER_COMMIT`` (None: not read) and the positions
        its events took."""
        lsn = None if wal_row is None else lsn_of(wal_row)
        self.written.advance(lsn, max(positions, default=0))

    def _read_lsn(self) -> int:
        with self.get_connection() as connection:
            return lsn_of(connection.execute(WAL_AFTER_COMMIT).fetchone())

    @contextmanager
    def reading_on(self, connection: Connection[DictRow]) -> Iterator[None]:
        """Every statement of this thread goes to ``connection`` (a replica's) until the
        block ends; only reads run there, so nothing can write through it."""
        held, self._held.connection = self.held_connection, connection
        try:
            yield
        finally:
            self._held.connection = held

    def register_type_adapters(self) -> None:
        """Nothing to register (and so no query while recorders are constructed)."""

    @property
    def own_backends(self) -> frozenset[int]:
        """The server processes of this store's pooled connections (the ``pid`` a NOTIFY
        from one of its commits carries): where a transaction pooler shares them, none."""
        return frozenset(self._backends)

    def after_connect_func(self) -> Callable[[Connection[Any]], None]:
        if not self.settings.transaction_pooled:
            configure = super().after_connect_func()

            def after_connect_noting(conn: Connection[Any]) -> None:
                configure(conn)
                self._backends.add(conn.info.backend_pid)

            return after_connect_noting

        # Through a transaction pooler the next transaction may run on another server
        # session: a session SET would reach some other client's session instead, and a
        # prepared statement would be missing where it is next used. The pooler's own
        # idle_transaction_timeout takes the place of idle_in_transaction_session_timeout.
        def after_connect(conn: Connection[Any]) -> None:
            conn.autocommit = True
            conn.prepare_threshold = None

        return after_connect

    @property
    def held_connection(self) -> Connection[DictRow] | None:
        """The connection this thread holds, if it holds one."""
        held: Connection[DictRow] | None = getattr(self._held, "connection", None)
        return held

    @contextmanager
    def get_connection(self) -> Iterator[Connection[DictRow]]:
        held = self.held_connection
        if held is not None:
            # Errors still reach the holder's own pooled connection, which translates them.
            yield held
            return
        with self._pooled() as connection:
            yield connection

    @contextmanager
    def holding(self) -> Iterator[Connection[DictRow]]:
        """One pooled connection for every statement of this thread until the block ends."""
        with self._pooled() as connection:
            self._held.connection = connection
            try:
                yield connection
            finally:
                self._held.connection = None

    @contextmanager
    def not_holding(self) -> Iterator[None]:
        """This thread's statements take pooled connections again until the block ends (the
        held transaction stays open, for the holder to go on with after)."""
        held, self._held.connection = self.held_connection, None
        try:
            yield
        finally:
            self._held.connection = held

    @contextmanager
    def _pooled(self) -> Iterator[Connection[DictRow]]:
        try:
            with super().get_connection() as connection:
                yield connection
        except (OperationalError, InterfaceError) as error:
            cause = psycopg_cause(error)
            fault = None if cause is None else connection_fault(cause)
            if cause is None or fault is None:
                raise
            if cause.sqlstate in SESSIONS_ENDED_SQLSTATES:
                self._discard_ended_sessions()
            raise self._unavailable(cause, fault) from error

    def _discard_ended_sessions(self) -> None:
        """Test the pool's idle connections now and replace the broken ones: each would
        otherwise fail the next statement sent on it, so a store whose sessions the server
        ended failed as many calls as it had idle connections, not one. Only where the
        server said it ended the session: its sockets are closed, so the test cannot hang
        the way it could on a network that went silent."""
        with suppress(Exception):
            self.pool.check()

    def _unavailable(self, error: psycopg.Error, fault: str) -> StorageUnavailableError:
        if fault == POOL_EXHAUSTED:
            # The pool only says it waited: a direct attempt tells a dead server from a busy
            # pool, and names the server's reason.
            reason = self.diagnose()
            if reason is not None:
                return reason
            detail = (
                f"no connection free within {self.settings.pool_timeout:g}s; pool_size="
                f"{self.settings.pool_size}, max_overflow={self.settings.max_overflow}"
            )
            return StorageUnavailableError(fault, self.settings.endpoint, detail)
        detail = _detail(error, self.settings.password)
        if fault == CONNECTION_LOST:
            return ConnectionLostError(fault, self.settings.endpoint, detail)
        return StorageUnavailableError(fault, self.settings.endpoint, detail)

    def diagnose(self) -> StorageUnavailableError | None:
        """Connect once outside the pool: why the server refuses, or None if it accepts."""
        try:
            psycopg.connect(self.settings.conninfo).close()
        except psycopg.Error as error:
            fault = connection_fault(error) or CONNECTION_LOST
            return StorageUnavailableError(
                fault, self.settings.endpoint, _detail(error, self.settings.password)
            )
        return None


STORED_EVENT_COLUMNS: Final = (
    "originator_id uuid NOT NULL, "
    "originator_version bigint NOT NULL, "
    "topic text NOT NULL, "
    "state bytea NOT NULL, "
)
"""The column definitions of a stored event, which both tables begin with."""


def stored_event_arrays(
    stored_events: Sequence[StoredEvent],
) -> tuple[UuidArray, BigintArray, TextArray, ByteaArray]:
    """The stored events column by column, for an ``unnest`` insert of the whole batch.

    Typed arrays (``binary_arrays``): psycopg would walk each list to find its type and dump
    each element in Python, a tenth of a restore's time (12k events, py-spy)."""
    return (
        UuidArray([as_uuid(s.originator_id) for s in stored_events]),
        BigintArray([s.originator_version for s in stored_events]),
        TextArray([s.topic for s in stored_events]),
        ByteaArray([s.state for s in stored_events]),
    )


class _InSchema(PostgresAggregateRecorder):
    """A recorder whose table lives in the datastore's schema, made first if it is missing.

    Its table carries a stamp (a comment) of the statements that made it and what they made:
    an open that finds the stamp of its own statements runs none of them. Run each time,
    they cost a fifth of opening a store, and each CREATE OR REPLACE FUNCTION made every
    session of every other process that used the function compile it again.
    """

    def create_table(self) -> None:
        if self._stamp_found() == self._stamp:
            return
        super().create_table()

    @cached_property
    def _stamp(self) -> str:
        """What this release makes: the digest of its statements (and ``_made_besides``);
        worked out once, by the open's check, and written by the DDL when it runs."""
        made = [statement.as_string() for statement in self.sql_create_statements]
        digest = hashlib.sha256("\n".join([*made, self._made_besides()]).encode())
        return f"runledger schema {digest.hexdigest()[:32]}"

    def _made_besides(self) -> str:
        """What ``_create_table`` makes besides ``sql_create_statements``, as text."""
        return ""

    def _stamp_found(self) -> str | None:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(
                "SELECT obj_description(c.oid, 'pg_class') AS stamp FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s AND c.relkind = 'r'",
                (self.datastore.schema, self.events_table_name),
            )
            row = curs.fetchone()
        return None if row is None else row["stamp"]

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        curs.execute(SQL("SET LOCAL lock_timeout = '{0}s'").format(self.datastore.lock_timeout))
        # Two processes opening a new database at once would otherwise race on the catalogue
        # (CREATE ... IF NOT EXISTS is not atomic against a concurrent CREATE).
        curs.execute("SELECT pg_advisory_xact_lock(hashtext('runledger.create_tables'))")
        schema = self.datastore.schema
        curs.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        # CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege even when the schema exists.
        if curs.fetchone() is None:
            curs.execute(SQL("CREATE SCHEMA IF NOT EXISTS {0}").format(Identifier(schema)))
        super()._create_table(curs)
        # In the same transaction as what it vouches for (a subclass's additions included).
        curs.execute(
            SQL("COMMENT ON TABLE {0}.{1} IS {2}").format(
                Identifier(schema), Identifier(self.events_table_name), Literal(self._stamp)
            )
        )


def _first(curs: Cursor[DictRow]) -> Any:
    """The first column of the statement's one row."""
    row = curs.fetchone()
    assert row is not None  # noqa: S101 - each caller's statement returns exactly one row
    return next(iter(row.values()))


def _advisory_key(name: str) -> int:
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def writer_lock_key(log_name: str) -> int:
    """The advisory lock (a signed 64-bit key) writers of one log hold while they write."""
    return _advisory_key(f"runledger-writers:{log_name}")


def aggregate_lock_keys(log_name: str, aggregate_ids: Sequence[UUID | str]) -> list[int]:
    """The advisory locks of these aggregates in the one order every writer takes them: two
    writers of overlapping aggregates then wait for each other at most one way round."""
    return sorted({_advisory_key(f"runledger-aggregate:{log_name}:{i}") for i in aggregate_ids})


def fenced_lock_keys(
    log_name: str, written: Sequence[UUID | str], fences: Sequence[Fence]
) -> tuple[list[int], list[bool]]:
    """The locks of an insert in the one order (``aggregate_lock_keys``): exclusive for the
    aggregates it writes and the guards of its index fences, shared for those it only
    version-fences (fenced writes of one run do not wait for each other, only for the run's
    writers); with whether each is shared."""
    guards = [fence.guard_id for fence in fences if isinstance(fence, IndexFence)]
    fenced = [fence.aggregate_id for fence in fences if isinstance(fence, VersionFence)]
    exclusive = set(aggregate_lock_keys(log_name, [*written, *guards]))
    shared = set(aggregate_lock_keys(log_name, fenced)) - exclusive
    keys = sorted(exclusive | shared)
    return keys, [key in shared for key in keys]


LOCK_AGGREGATES: Final = "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k"

BEGIN_WIDE_WRITE: Final = "SELECT pg_advisory_xact_lock(%s), pg_notify(%s, '')"
"""The log's writer lock exclusively, and the NOTIFY: a retention write (a tree's removal or
restore) draws its positions with no other writer open, as the commit function's wide batch
does."""

MAX_AGGREGATE_LOCKS: Final = 64
"""Most aggregate locks one transaction takes (PostgreSQL's default max_locks_per_transaction):
each uses a slot of the server's shared lock table."""


NOT_AT_POSITIONS_SQLSTATE: Final = "RLPM2"
"""The SQLSTATE of the check that a command's events took the positions it projected."""
FENCE_BROKEN_SQLSTATE: Final = "RLFN1"
"""The SQLSTATE of the check that an insert's fences still hold (``Fence``)."""

COMMIT_FUNCTION_NAME: Final = "runledger_commit_v2"
"""The server-side commit of one command (``COMMIT_FUNCTION``); a change of its parameters or
results takes a new version in the name, as ``CREATE OR REPLACE`` cannot change them."""
COMMIT_FUNCTION: Final = (
    "CREATE OR REPLACE FUNCTION {function}("
    "p_writer_key bigint, p_channel text, p_keys bigint[], p_shared boolean[], p_wide boolean, "
    "p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_run_ids text[], "
    "p_lookup_keys text[], p_fence_ids uuid[], p_fence_versions bigint[], p_fence_topics text[], "
    "p_index_keys text[], p_index_seen jsonb, p_archived_ids uuid[], p_first bigint, "
    "p_move_names text[], "
    "p_move_slots bigint[], p_move_expected bigint[], p_move_new bigint[], p_move_states text[], "
    "p_statements text[], p_offsets integer[], p_counts integer[], p_values text[], "
    "OUT positions bigint[], OUT written boolean, OUT step_sqlstate text, OUT step_error text) "
    "LANGUAGE plpgsql AS {body}"
)
"""The commit function's declaration; its body is ``COMMIT_FUNCTION_BODY``."""
COMMIT_FUNCTION_BODY: Final = (
    " DECLARE i integer; n integer; BEGIN "
    # Aggregates first, in the one order (``fenced_lock_keys``), then the log's writer lock
    # and the NOTIFY; a batch too wide to lock its aggregates takes the writer lock alone.
    "IF p_wide THEN PERFORM pg_advisory_xact_lock(p_writer_key); ELSE "
    "FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP "
    "IF p_shared[i] THEN PERFORM pg_advisory_xact_lock_shared(p_keys[i]); "
    "ELSE PERFORM pg_advisory_xact_lock(p_keys[i]); END IF; END LOOP; "
    "PERFORM pg_advisory_xact_lock_shared(p_writer_key); END IF; "
    "PERFORM pg_notify(p_channel, ''); "
    # Positions drawn in the batch's order; sorted, they are that order again.
    "WITH inserted AS (INSERT INTO {schema}.{table} "
    "(originator_id, originator_version, topic, state, run_id, lookup_key) "
    "SELECT e.originator_id, e.originator_version, e.topic, e.state, e.run_id, e.lookup_key "
    "FROM unnest(p_ids, p_versions, p_topics, p_states, p_run_ids, p_lookup_keys) "
    "WITH ORDINALITY AS e(originator_id, originator_version, topic, state, run_id, lookup_key, n) "
    "ORDER BY e.n RETURNING position) "
    "SELECT array_agg(position ORDER BY position) INTO positions FROM inserted; "
    "IF coalesce(array_length(p_fence_ids, 1), 0) > 0 THEN "
    "PERFORM {schema}.runledger_check_fences(p_fence_ids, p_fence_versions, p_fence_topics); "
    "END IF; "
    "FOR i IN 1 .. coalesce(array_length(p_index_keys, 1), 0) LOOP "
    "PERFORM {schema}.runledger_check_index_fence(p_index_keys[i], ARRAY(SELECT "
    "jsonb_array_elements_text(p_index_seen -> (i - 1))::uuid)); END LOOP; "
    # What the commit rests on without writing it must not be pruned since it was read.
    "IF coalesce(array_length(p_archived_ids, 1), 0) > 0 THEN "
    "PERFORM {schema}.runledger_check_archived(p_archived_ids); END IF; "
    "written := false; "
    "IF p_first IS NOT NULL THEN BEGIN "
    # The step wrote for the positions it expected: exactly those, or nothing of it.
    "n := array_length(positions, 1); "
    "IF positions[1] <> p_first OR positions[n] <> p_first + n - 1 THEN "
    "RAISE EXCEPTION 'events are not at the expected positions' "
    "USING ERRCODE = {not_at_positions}; END IF; "
    "IF coalesce(array_length(p_move_names, 1), 0) > 0 THEN "
    "PERFORM {schema}.runledger_move_view_slots(p_move_names, p_move_slots, p_move_expected, "
    "p_move_new, p_move_states); END IF; "
    "FOR i IN 1 .. coalesce(array_length(p_statements, 1), 0) LOOP "
    "EXECUTE p_statements[i] USING p_values, p_offsets[i], p_counts[i]; END LOOP; "
    "written := true; "
    # A failed step rolls back to before it (a subtransaction, as a savepoint): the events
    # commit alone and the read models catch up from the log.
    "EXCEPTION WHEN OTHERS THEN step_sqlstate := SQLSTATE; step_error := SQLERRM; END; "
    "END IF; END "
)
"""One command's commit as one call: its locks in the fixed order, the NOTIFY, the insert
(positions drawn by the server, gap-safe as ever: the writer lock is held from before they
are drawn), its fences, and the read-model step's tracking moves and view writes behind a
subtransaction; it returns the positions and whether the step's writes stand."""

SETTLE_WAIT_SECONDS: Final = 1.0
"""How long a log query waits for the writers open when it starts before it stops its page
short, just below the first position that is not visible yet."""


def _lower_bound(conditions: Sequence[LogCondition]) -> int:
    """The position a log query starts after (0 for the whole log)."""
    lower = 0
    for column, operator, value in conditions:
        if column == "position" and operator in (">", ">="):
            lower = max(lower, value if operator == ">" else value - 1)
    return lower


class PostgresEventRecorder(SqlLogQueries, _InSchema, PostgresApplicationRecorder):
    """The event log. Writers do not lock the table: concurrent commits may make positions
    visible out of order, so ``PostgresStorage.read_log`` waits at such gaps (see there) and
    every other log query reads only up to its settled horizon (``_settled_horizon``)."""

    datastore: _ArrayRowsDatastore

    def __init__(
        self,
        datastore: _ArrayRowsDatastore,
        *,
        events_table_name: str = EVENTS_TABLE,
        snapshots_table_name: str = SNAPSHOTS_TABLE,
    ) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        schema = Identifier(datastore.schema)
        table = Identifier(events_table_name)
        # The snapshot row first (kind 0), then the events after its version (``ports.
        # SnapshotReads``); either part may be empty. Without a snapshot every event, as the
        # library reads them: a stored version below 1 is the decoder's to name as corrupt,
        # not this read's to skip. Two branches, not one with an OR, so that the events
        # after a snapshot are a range of the aggregate's index, not all its rows filtered.
        self._from_snapshot_statement = SQL(
            "WITH snapshot AS (SELECT originator_id, originator_version, topic, state "
            "FROM {schema}.{snapshots} WHERE originator_id = %(id)s "
            "ORDER BY originator_version DESC LIMIT 1) "
            "SELECT 0 AS kind, originator_id, originator_version, topic, state FROM snapshot "
            "UNION ALL SELECT 1, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE originator_id = %(id)s "
            "AND originator_version > (SELECT originator_version FROM snapshot) "
            "UNION ALL SELECT 1, originator_id, originator_version, topic, state "
            "FROM {schema}.{table} WHERE originator_id = %(id)s "
            "AND NOT EXISTS (SELECT FROM snapshot) "
            "ORDER BY kind, originator_version"
        ).format(schema=schema, table=table, snapshots=Identifier(snapshots_table_name))
        self.sql_create_statements = [
            SQL(
                "CREATE TABLE IF NOT EXISTS {schema}.{table} ("
                "position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                + STORED_EVENT_COLUMNS
                + "run_id text, "
                "lookup_key text, "
                "UNIQUE (originator_id, originator_version))"
            ).format(schema=schema, table=table),
            SQL(
                "CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} (run_id, position) "
                "WHERE run_id IS NOT NULL"
            ).format(
                index=Identifier(f"{events_table_name}_run_id_position_idx"),
                schema=schema,
                table=table,
            ),
            SQL(
                "CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} (lookup_key) "
                "WHERE lookup_key IS NOT NULL"
            ).format(
                index=Identifier(f"{events_table_name}_lookup_key_idx"),
                schema=schema,
                table=table,
            ),
            # Some (aggregate, version, topic) has an event of that topic after that version.
            # One probe of the aggregate's index per fence, planned at each call: a session
            # keeps the generic plan it chose while the log was small (a scan of the whole
            # log) until the table is analyzed again, so a fenced command's check grew with
            # the log, 0.05 -> 0.44 ms over 5,000 events in one P10 run. Planning costs a
            # call about 13 us.
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.runledger_check_fences"
                "(p_ids uuid[], p_versions bigint[], p_topics text[]) RETURNS void "
                "LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$ BEGIN "
                "FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP "
                "IF EXISTS (SELECT 1 FROM {schema}.{table} WHERE originator_id = p_ids[i] "
                "AND originator_version > p_versions[i] AND topic = p_topics[i]) THEN "
                "RAISE EXCEPTION 'a fence of the insert is broken' "
                f"USING ERRCODE = '{FENCE_BROKEN_SQLSTATE}'; END IF; END LOOP; END $$"
            ).format(schema=schema, table=table),
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.runledger_check_index_fence"
                "(p_key text, p_seen uuid[]) RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
                "IF EXISTS (SELECT 1 FROM {schema}.{table} WHERE lookup_key = p_key "
                "AND NOT (originator_id = ANY(p_seen))) THEN "
                "RAISE EXCEPTION 'an index fence of the insert is broken' "
                f"USING ERRCODE = '{FENCE_BROKEN_SQLSTATE}'; END IF; END $$"
            ).format(schema=schema, table=table),
        ]
        # The archived-ids guard (``storage.archived``): once per insert statement, over the
        # rows it inserted, so a batch pays one probe of an index that is mostly empty.
        self.sql_create_statements += [
            SQL(
                "CREATE TABLE IF NOT EXISTS {schema}.{guard} ("
                "aggregate_id uuid PRIMARY KEY, archive_id uuid NOT NULL)"
            ).format(schema=schema, guard=Identifier(ARCHIVED_TABLE)),
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.runledger_refuse_archived() "
                "RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF EXISTS (SELECT 1 FROM "
                "inserted AS i JOIN {schema}.{guard} AS a ON a.aggregate_id = i.originator_id) "
                f"THEN RAISE EXCEPTION '{ARCHIVED_MESSAGE}' USING ERRCODE = '{ARCHIVED_SQLSTATE}'; "
                "END IF; RETURN NULL; END $$"
            ).format(schema=schema, guard=Identifier(ARCHIVED_TABLE)),
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.runledger_check_archived(p_ids uuid[]) "
                "RETURNS void LANGUAGE plpgsql AS $$ BEGIN IF EXISTS (SELECT 1 FROM "
                "{schema}.{guard} WHERE aggregate_id = ANY(p_ids)) THEN "
                f"RAISE EXCEPTION '{ARCHIVED_MESSAGE}' USING ERRCODE = '{ARCHIVED_SQLSTATE}'; "
                "END IF; END $$"
            ).format(schema=schema, guard=Identifier(ARCHIVED_TABLE)),
            # Made once: creating a trigger locks the table against inserts, and every store
            # that opens runs these statements.
            SQL(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = {name} "
                "AND tgrelid = {qualified}::regclass) THEN "
                "CREATE TRIGGER {trigger} AFTER INSERT ON {schema}.{table} "
                "REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT "
                "EXECUTE FUNCTION {schema}.runledger_refuse_archived(); END IF; END $$"
            ).format(
                name=Literal(f"{events_table_name}_archived_guard"),
                qualified=Literal(f'"{datastore.schema}"."{events_table_name}"'),
                trigger=Identifier(f"{events_table_name}_archived_guard"),
                schema=schema,
                table=table,
            ),
        ]
        # ORDER BY the array ordinal makes identity values follow the order of the batch;
        # the alias lets the library's _fetch_ids_after_insert_events read them.
        self.insert_events_statement = SQL(
            "INSERT INTO {schema}.{table} "
            "(originator_id, originator_version, topic, state, run_id, lookup_key) "
            "SELECT originator_id, originator_version, topic, state, run_id, lookup_key "
            "FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[], %s::text[], "
            "%s::text[]) WITH ORDINALITY "
            "AS e(originator_id, originator_version, topic, state, run_id, lookup_key, n) "
            "ORDER BY n "
            "RETURNING position AS notification_id"
        ).format(schema=schema, table=table)
        # Its source as the server keeps it: replaced only when it differs, since every
        # replacement makes each session that uses it compile it again.
        self._commit_function_body = (
            SQL(COMMIT_FUNCTION_BODY)
            .format(schema=schema, table=table, not_at_positions=Literal(NOT_AT_POSITIONS_SQLSTATE))
            .as_string()
        )
        self._install_commit_function = SQL(COMMIT_FUNCTION).format(
            function=Identifier(datastore.schema, COMMIT_FUNCTION_NAME),
            body=Literal(self._commit_function_body),
        )
        self.max_notification_id_statement = SQL(
            "SELECT MAX(position) FROM {schema}.{table}"
        ).format(schema=schema, table=table)
        self._select_columns = SQL(
            "SELECT position, originator_id, originator_version, topic, state FROM {schema}.{table}"
        ).format(schema=schema, table=table)
        self._select_originators_by_key = SQL(
            "SELECT originator_id, MIN(position) AS first_position FROM {schema}.{table} "
            "WHERE lookup_key = %s GROUP BY originator_id ORDER BY first_position"
        ).format(schema=schema, table=table)
        self._last_drawn_statement = (
            "SELECT pg_sequence_last_value(pg_get_serial_sequence(%s, 'position')::regclass)"
        )
        self._qualified_table = f'"{datastore.schema}"."{events_table_name}"'
        # The first position after %(lower)s, up to %(drawn)s, that no visible row has.
        self._first_hole_statement = SQL(
            "SELECT MIN(c.p) FROM (SELECT %(lower)s::bigint + 1 AS p UNION ALL "
            "SELECT position + 1 FROM {schema}.{table} "
            "WHERE position > %(lower)s AND position < %(drawn)s) AS c "
            "WHERE c.p <= %(drawn)s AND NOT EXISTS "
            "(SELECT 1 FROM {schema}.{table} AS e WHERE e.position = c.p)"
        ).format(schema=schema, table=table)
        self._commit_call = (
            SQL(
                "SELECT positions, written, step_sqlstate, step_error FROM {function}("
                "%b, %b, %b::bigint[], %b::boolean[], %b, %b::uuid[], %b::bigint[], %b::text[], "
                "%b::bytea[], %b::text[], %b::text[], %b::uuid[], %b::bigint[], %b::text[], "
                "%b::text[], %b::jsonb, %b::uuid[], %b::bigint, %b::text[], %b::bigint[], "
                "%b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::integer[], %b::integer[], "
                "%b::text[])"
            )
            .format(function=Identifier(datastore.schema, COMMIT_FUNCTION_NAME))
            .as_string()
        )
        self._check_fences = SQL(
            "SELECT {schema}.runledger_check_fences(%s::uuid[], %s::bigint[], %s::text[])"
        ).format(schema=schema)
        self._check_archived = SQL("SELECT {schema}.runledger_check_archived(%s::uuid[])").format(
            schema=schema
        )
        self._check_index_fence = SQL(
            "SELECT {schema}.runledger_check_index_fence(%s, %s::uuid[])"
        ).format(schema=schema)
        self.channel_name = f"{datastore.schema}.{events_table_name}"
        self.writer_lock_key = writer_lock_key(self.channel_name)
        self.group = GroupCommit(self._record_pooled)

    def select_from_snapshot(
        self, originator_id: UUID
    ) -> tuple[StoredEvent | None, Sequence[StoredEvent]]:
        """The latest snapshot and the events after it in one round trip, where the library
        reads them in two (``cached_aggregates``)."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._from_snapshot_statement, {"id": originator_id}, prepare=True)
            rows = curs.fetchall()
        stored = [
            StoredEvent(
                originator_id=row["originator_id"],
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
            for row in rows
        ]
        if rows and rows[0]["kind"] == 0:
            return stored[0], stored[1:]
        return None, stored

    def _made_besides(self) -> str:
        return self._commit_function_body

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        super()._create_table(curs)
        curs.execute(
            "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s AND p.proname = %s",
            (self.datastore.schema, COMMIT_FUNCTION_NAME),
        )
        installed = curs.fetchone()
        if installed is None or installed["prosrc"] != self._commit_function_body:
            curs.execute(self._install_commit_function)

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        same_commit: SameCommit | None = None,
        fences: Sequence[Fence] = (),
        **_: Any,
    ) -> Sequence[int] | None:
        if not stored_events:
            return []
        held = self.datastore.held_connection
        if held is not None:
            # A command holding its aggregates commits its own transaction, locks and all.
            positions = self._record(held, stored_events, same_commit, fences, begun=True)
            TELEMETRY.committed(stored_events, 1)
            return positions
        return self.group.insert(stored_events, same_commit, fences)

    @_retried
    def _record_pooled(
        self,
        stored_events: Sequence[StoredEvent],
        same_commit: SameCommit | None,
        fences: Sequence[Fence],
    ) -> list[int]:
        with self.datastore.get_connection() as conn:
            return self._record(conn, stored_events, same_commit, fences, begun=False)

    def _record(
        self,
        conn: Connection[DictRow],
        stored_events: Sequence[StoredEvent],
        same_commit: SameCommit | None,
        fences: Sequence[Fence],
        *,
        begun: bool,
    ) -> list[int]:
        """One transaction, one round trip: the locks, NOTIFY, the insert, the step's writes
        behind a savepoint, and COMMIT go out as one pipeline.

        Positions are drawn by the server, so the step writes for the positions it expects
        (``next_position`` on): a check on the server, behind the savepoint, makes sure the
        events took exactly those. If another writer drew one of them, or the step's
        compare-and-set finds a projection moved, the transaction rolls back to the savepoint
        and commits the events alone (a second trip, only then).

        A command holding its aggregates (``PostgresStorage.lock_aggregates``) has begun the
        transaction already; it ends here, before the application caches the aggregates, as
        on the unheld path, and releases the locks as early as possible.
        """
        written = False
        try:
            step: SameCommit | None = None
            if begun and same_commit is not None:
                # In transactions of its own: the views' commits do not wait for the disk,
                # which this transaction's events must.
                with self.datastore.not_holding():
                    same_commit.catch_up()
            first = None if same_commit is None else same_commit.next_position()
            expected = [] if first is None else list(range(first, first + len(stored_events)))
            # Prepared before the pipeline starts: working the rows out may read, which
            # inside the pipeline would cost a trip each and could meet the insert's error.
            if (
                same_commit is not None
                and expected
                and same_commit.prepare(stored_events, expected)
            ):
                step = same_commit
            try:
                positions, written = self._call(
                    conn, stored_events, step, expected, fences, begun=begun
                )
            except psycopg.Error as error:
                written = False
                positions = self._after_failure(conn, error)
        except BaseException:
            # Never back to the pool inside the transaction: it holds the writer lock, and
            # followers wait at its positions until it ends.
            if conn.info.transaction_status in (
                TransactionStatus.INTRANS,
                TransactionStatus.INERROR,
            ):
                conn.execute("ROLLBACK")
            if same_commit is not None:
                same_commit.settle(False)
            raise
        if same_commit is not None:
            same_commit.settle(written)
        return positions

    def _call(
        self,
        conn: Connection[DictRow],
        stored_events: Sequence[StoredEvent],
        step: SameCommit | None,
        expected: list[int],
        fences: Sequence[Fence],
        *,
        begun: bool,
    ) -> tuple[list[int], bool]:
        rows = CommitRows()
        first = expected[0] if step is not None and step.write(rows) else None
        params = self._commit_params(stored_events, fences, first, rows)
        if begun:
            row, wal_row = self._call_and_commit(conn, params)
        else:
            # One plain statement, no pipeline (which costs the client more time and the
            # command a longer wait, for its sync and flush): unheld, the call is a
            # transaction of its own (autocommit) that commits as the call ends, on the server.
            with conn.cursor(row_factory=tuple_row) as curs:
                row = curs.execute(self._commit_call, params).fetchone()
                # Where the commit lies in the WAL, for replica reads: read after it, never
                # in the call (that would be short of the commit record).
                wal_row = (
                    conn.execute(WAL_AFTER_COMMIT).fetchone()
                    if self.datastore.reads_wal_at_commit
                    else None
                )
        # The function's OUT parameters, in their order (``COMMIT_FUNCTION``): tuples, as a
        # dictionary row costs the client its column names again at every command.
        positions: list[int]
        positions, written, step_sqlstate, step_error = row
        self.datastore.committed(wal_row, positions)
        if (
            first is not None
            and not written
            and step_sqlstate not in (MOVED_SQLSTATE, NOT_AT_POSITIONS_SQLSTATE)
        ):
            logger.error("read models not written with the events (%s); they catch up", step_error)
        return positions, bool(written)

    def _call_and_commit(self, conn: Connection[DictRow], params: list[Any]) -> tuple[Any, Any]:
        """The call, COMMIT (and the WAL position after it) in one round trip, for a command
        holding its aggregates: other writers of them wait for its lock, so its commit must
        not wait for a second trip (and the client's turn on a busy machine) too."""
        states, values = params[8].items, params[-1].items
        with (
            pipelined(
                conn, sum(map(len, states)) + sum(len(v) for v in values if v is not None)
            ) as pipeline,
            conn.cursor(row_factory=tuple_row) as call,
            conn.cursor() as curs,
            conn.cursor() as wal,
        ):
            call.execute(self._commit_call, params)
            curs.execute(b"COMMIT")
            if self.datastore.reads_wal_at_commit:
                wal.execute(WAL_AFTER_COMMIT)
            if pipeline is not None:
                pipeline.sync()
            row = call.fetchone()
            return row, wal.fetchone() if self.datastore.reads_wal_at_commit else None

    def _commit_params(
        self,
        stored_events: Sequence[StoredEvent],
        fences: Sequence[Fence],
        first: int | None,
        rows: CommitRows,
    ) -> list[Any]:
        """The commit function's arguments (``COMMIT_FUNCTION``), in its order."""
        keys, shared = fenced_lock_keys(
            self.channel_name, [s.originator_id for s in stored_events], fences
        )
        # A batch this wide (a bulk load, a cascade over many follow-ups) writes alone
        # instead: every other writer holds the lock shared while it inserts.
        wide = len(keys) > MAX_AGGREGATE_LOCKS
        indexes = [index_columns(s) for s in stored_events]
        conditions = fence_conditions(fences)
        guarded = index_fences(fences)
        names, slots, expected, new, move_states = rows.moves
        # Typed arrays (``binary_arrays``): psycopg would walk each list to find its type.
        return [
            self.writer_lock_key,
            self.channel_name,
            BigintArray([] if wide else keys),
            BooleanArray([] if wide else shared),
            wide,
            *stored_event_arrays(stored_events),
            TextArray([run_id for run_id, _ in indexes]),
            TextArray([lookup_key for _, lookup_key in indexes]),
            UuidArray([c[0] for c in conditions]),
            BigintArray([c[1] for c in conditions]),
            TextArray([c[2] for c in conditions]),
            TextArray([fence.lookup_key for fence in guarded]),
            json.dumps([[str(i) for i in fence.seen] for fence in guarded]) if guarded else None,
            UuidArray(fenced_ids(fences)),
            first,
            TextArray(names),
            BigintArray(slots),
            BigintArray(expected),
            BigintArray(new),
            TextArray(move_states),
            TextArray(rows.statements),
            IntegerArray(rows.offsets),
            IntegerArray(rows.counts),
            TextArray(rows.values),
        ]

    def _after_failure(self, conn: Connection[DictRow], error: psycopg.Error) -> list[int]:
        """After a failed commit call: roll back, and raise a conflict as ``IntegrityError``."""
        if conn.info.transaction_status in (TransactionStatus.INERROR, TransactionStatus.INTRANS):
            conn.execute(b"ROLLBACK")
        if error.sqlstate == FENCE_BROKEN_SQLSTATE:
            raise FenceBrokenError(str(error)) from error
        if error.sqlstate == ARCHIVED_SQLSTATE:
            raise ArchivedAggregateError(str(error)) from error
        if isinstance(error, psycopg.IntegrityError | psycopg.errors.DeadlockDetected):
            # A deadlock needs an aggregate this attempt changed but did not hold from the
            # start; like a version conflict, the command runs again holding it too.
            raise IntegrityError(str(error)) from error
        raise error

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        """Not offered: the library's subscription reads positions in order and would pass
        gaps that concurrent writers fill later. Follow with ``PostgresStorage.read_log``."""
        msg = "follow the runledger log with PostgresStorage.read_log (gap-safe)"
        raise NotImplementedError(msg)

    @_retried
    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Originators with an event under ``lookup_key``, by first position."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._select_originators_by_key, (lookup_key,), prepare=True)
            return [row["originator_id"] for row in curs.fetchall()]

    def writers(self, conn: Connection[Any], among: Sequence[str] | None = None) -> set[str]:
        """The (virtual) transactions now holding this log's writer lock (of ``among``)."""
        # pg_locks shows a bigint advisory key as two unsigned 32-bit halves.
        statement = (
            "SELECT virtualtransaction FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1 AND granted"
        )
        key = self.writer_lock_key
        params: list[Any] = [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF]
        if among is not None:
            statement += " AND virtualtransaction = ANY(%s)"
            params.append(list(among))
        with conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(statement, params)
            return {row[0] for row in curs.fetchall()}

    def _settled_horizon(self, conn: Connection[Any], lower: int) -> int:
        """The highest position up to which the log is final: a position at or below it that
        is not visible now never will be, so a query that stops there skips nothing.

        A writer takes the log's writer lock before it draws positions and keeps it until it
        ends, so every position drawn when the sequence is read belongs to a transaction that
        has ended or holds that lock just after. Once those have ended, every position up to
        the one read is committed or rolled back for good. If one stays open, the query stops
        just below the first position after ``lower`` that is not visible.
        """
        with conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(self._last_drawn_statement, (self._qualified_table,), prepare=True)
            row = curs.fetchone()
            drawn: int = (row[0] if row else None) or 0
            if drawn <= lower:
                return drawn
            open_writers = self.writers(conn)
            deadline = time.monotonic() + SETTLE_WAIT_SECONDS
            while open_writers and time.monotonic() < deadline:
                time.sleep(0.001)
                open_writers = self.writers(conn, sorted(open_writers))
            if not open_writers:
                return drawn
            curs.execute(self._first_hole_statement, {"lower": lower, "drawn": drawn})
            hole = curs.fetchone()
            return drawn if hole is None or hole[0] is None else hole[0] - 1

    @_retried
    def _select(self, conditions: Sequence[LogCondition], limit: int) -> list[Notification]:
        """The first ``limit`` notifications meeting every condition, in position order, up
        to the settled horizon: this serves ``event_log`` and the library's notification log."""
        clauses = [
            SQL("{} = ANY(%s)").format(Identifier(column))
            if operator == "in"
            else SQL("{} {} %s").format(Identifier(column), SQL(operator))
            for column, operator, _ in conditions
        ]
        statement = (
            self._select_columns
            + SQL(" WHERE ")
            + SQL(" AND ").join([*clauses, SQL("position <= %s")])
        )
        statement += SQL(" ORDER BY position LIMIT %s")
        params = [value for _, _, value in conditions]
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            horizon = self._settled_horizon(conn, _lower_bound(conditions))
            curs.execute(statement, [*params, horizon, limit], prepare=True)
            return [
                Notification(
                    id=row["position"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]


class PostgresSnapshotRecorder(UuidOriginatorIds, _InSchema):
    """Snapshots keyed by (originator_id, originator_version)."""

    def __init__(
        self, datastore: PostgresDatastore, *, events_table_name: str = SNAPSHOTS_TABLE
    ) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        schema = Identifier(datastore.schema)
        table = Identifier(events_table_name)
        self.sql_create_statements = [
            SQL(
                "CREATE TABLE IF NOT EXISTS {schema}.{table} ("
                + STORED_EVENT_COLUMNS
                + "PRIMARY KEY (originator_id, originator_version))"
            ).format(schema=schema, table=table)
        ]
        self.insert_events_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
            "SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[])"
        ).format(schema=schema, table=table)

    def _insert_stored_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **_: Any
    ) -> None:
        curs.execute(self.insert_events_statement, stored_event_arrays(stored_events))


class PostgresStorage(RecorderBackedStorage[PostgresEventRecorder, PostgresSnapshotRecorder]):
    """Event log and snapshots in the PostgreSQL database at ``url``, inside ``schema``."""

    reads_ahead = True
    """The server reads while the rebuild projects: 27.8-28.8k -> 29.5-31.4k events/s for
    one process on 50k events."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int | None = None,
        max_overflow: int | None = None,
        lock_timeout: int = LOCK_TIMEOUT_SECONDS,
        connect_timeout: int | None = None,
        pool_timeout: float | None = None,
        create: bool = True,
    ) -> None:
        # Keyword arguments win over the URL's parameters, which win over the defaults.
        settings = read_postgres_url(url).with_overrides(
            pool_size=pool_size,
            max_overflow=max_overflow,
            connect_timeout=connect_timeout,
            pool_timeout=pool_timeout,
        )
        self.schema = schema or "public"
        self.datastore = _ArrayRowsDatastore(
            settings, lock_timeout=lock_timeout, schema=self.schema
        )
        # Fail fast and say why: the pool would only report, after its timeout, that it got
        # no connection.
        unreachable = self.datastore.diagnose()
        if unreachable is not None:
            self.datastore.close()
            raise unreachable
        try:
            super().__init__(
                PostgresEventRecorder(self.datastore), PostgresSnapshotRecorder(self.datastore)
            )
            if not create:
                self._check_exists(settings)
            self._events.create_table()
            self._snapshots.create_table()
        except BaseException:
            self.datastore.close()
            raise
        self.replicas = (
            ReplicaSet(
                settings.replica_conninfos,
                [redact_url(url) for url in settings.replica_url],
                wait=settings.replica_wait,
                keep=settings.pool_size,
                prepare=not settings.transaction_pooled,
            )
            if settings.replica_url
            else None
        )
        self._gaps: dict[int, list[str]] = {}
        self.gap_wait = 0.05
        self._read_log_statement = SQL(
            f"SELECT {LOG_COLUMNS} FROM {{schema}}.{{table}} "
            "WHERE position > %s ORDER BY position LIMIT %s"
        ).format(schema=Identifier(self.schema), table=Identifier(EVENTS_TABLE))
        # The log's head from its index, whatever the plan: "WHERE position > %s LIMIT 1"
        # planned generically (prepared) scanned the table for the row it did not find.
        self._probe_statement = SQL(
            "SELECT 1 WHERE (SELECT max(position) FROM {schema}.{table}) > %s"
        ).format(schema=Identifier(self.schema), table=Identifier(EVENTS_TABLE))

    def _check_exists(self, settings: PostgresSettings) -> None:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = %s)"
                " AS found",
                (self.schema, EVENTS_TABLE),
            )
            row = curs.fetchone()
        if row is None or not row["found"]:
            raise StoreNotFoundError(
                url=settings.endpoint,
                reason=f"the database has no runledger tables in schema {self.schema!r}",
            )

    @_retried
    def read_log(self, *, after: int, limit: int, settled_through: int = 0) -> list[LogEntry]:
        """The next stored events after ``after``, never passing a position that an open
        transaction may still fill.

        Writers commit concurrently, so position 7 can become visible before position 6. A
        missing position below a visible one is a *gap*: its writer is either still open
        (6 will appear) or rolled back (6 never will). Every writer holds a shared advisory
        lock of this log from before it draws positions until it ends, so when a gap is first
        met, the writer of the missing position is among the transactions holding that lock.
        Once none of them holds it any more, a read made after that which still lacks the
        position skips it. Until then the read stops just before the gap. Transactions that
        are not writers of this log never hold a follower back. A missing position at or
        below ``settled_through`` is a hole for good (the caller knows it is settled).
        """
        deadline = time.monotonic() + self.gap_wait
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            for gap in [gap for gap in self._gaps if gap <= after]:
                del self._gaps[gap]
            while True:
                entries, blocking = self._read_to_gap(curs, after, limit, settled_through)
                if blocking is not None and not self._gaps[blocking]:
                    # No writer was open when the gap was met: it is settled, and a read made
                    # now sees the position if a writer committed it just before. Read again,
                    # rather than end a page short (a caller takes that for the log's end).
                    continue
                # Writers commit within milliseconds: waiting a moment for the open ones
                # usually settles the gap, so a caught-up query does not stop short of it.
                if blocking is None or entries or time.monotonic() >= deadline:
                    return entries
                time.sleep(0.001)

    def log_probe(self, after: int) -> LogProbe:
        """Whether any event, committed or past a gap, lies past ``after``: a query that finds
        none reads views already holding every commit before it (``storage.log_probes``)."""
        return LogProbe(after, self._probe_statement, (after,))

    def _read_to_gap(
        self, curs: Cursor[Any], after: int, limit: int, settled_through: int
    ) -> tuple[list[LogEntry], int | None]:
        """The entries up to the first unsettled gap, and that gap (None if none was met)."""
        settled = self._settled_gaps(curs)
        curs.execute(self._read_log_statement, (after, limit), prepare=True)
        entries: list[LogEntry] = []
        expected = after + 1
        for row in curs.fetchall():
            position = row[0]
            while expected < position:
                if expected > settled_through and expected not in settled:
                    if expected not in self._gaps:
                        self._gaps[expected] = sorted(self._events.writers(curs.connection))
                    return entries, expected
                expected += 1
            entries.append(LogEntry(*row))
            expected = position + 1
        return entries, None

    def _settled_gaps(self, curs: Cursor[Any]) -> set[int]:
        """Gaps whose possible writers have all finished: missing for good if still missing."""
        if not self._gaps:
            return set()
        noted = sorted({writer for writers in self._gaps.values() for writer in writers})
        still_writing = self._events.writers(curs.connection, noted) if noted else set()
        return {
            gap for gap, writers in self._gaps.items() if not still_writing.intersection(writers)
        }

    def __repr__(self) -> str:
        return f"PostgresStorage({self.datastore.settings.endpoint!r}, schema={self.schema!r})"

    @contextmanager
    def lock_aggregates(
        self, aggregate_ids: Sequence[UUID], *, conflicted: bool = True, first: bool = False
    ) -> Iterator[None]:
        """Hold these aggregates' advisory locks (in the one fixed order) in a transaction
        that every statement of this thread in the block uses and that its save commits;
        hot ones too, not only conflicted ones: writer processes of a hot run then take turns
        instead of racing (each race costs a round trip and a catch-up)."""
        del conflicted, first
        if not aggregate_ids:
            yield
            return
        # Beyond the cap a contended command serialises on its first aggregates only; its
        # insert then writes alone (see ``_insert_stored_events``).
        keys = aggregate_lock_keys(self._events.channel_name, aggregate_ids)[:MAX_AGGREGATE_LOCKS]
        with self.datastore.holding() as conn:
            try:
                # One trip for both.
                with conn.pipeline():
                    conn.execute(b"BEGIN", prepare=False)
                    conn.execute(LOCK_AGGREGATES, (keys,), prepare=False)
                yield
            finally:
                # Still open when the command saved nothing or failed before its commit.
                if conn.info.transaction_status in (
                    TransactionStatus.INTRANS,
                    TransactionStatus.INERROR,
                ):
                    conn.execute("ROLLBACK")

    @contextmanager
    def _held_transaction(self) -> Iterator[Cursor[DictRow]]:
        """A transaction of its own on a held connection (retention's removal and restore):
        begun here, committed by the block (``_commit``), rolled back if the block raises."""
        with self.datastore.holding() as conn, conn.cursor() as curs:
            try:
                curs.execute(b"BEGIN")
                yield curs
            except BaseException:
                if conn.info.transaction_status in (
                    TransactionStatus.INTRANS,
                    TransactionStatus.INERROR,
                ):
                    conn.execute("ROLLBACK")
                raise

    def _commit(self, curs: Cursor[DictRow], positions: list[int]) -> None:
        """Commit, then note the commit's WAL position for read-your-writes."""
        curs.execute(b"COMMIT")
        self.datastore.committed(curs.execute(WAL_AFTER_COMMIT).fetchone(), positions)

    def remove_tree(self, removal: TreeRemoval, write_views: ViewsWrite) -> int:
        """Remove a pruned tree in one transaction (``storage.archived``); returns the
        tombstone's position.

        It locks like a command, then more: the tree's aggregate locks in the one fixed
        order (a command holding one finishes first; beyond ``MAX_AGGREGATE_LOCKS`` none),
        then the log's writer lock exclusively, so no writer is open while it draws the
        tombstone's position (followers' gap waits stay exact) and every insert after it
        sees the guard rows it commits.
        """
        events = self._events
        schema = Identifier(self.schema)
        table = SQL("{0}.{1}").format(schema, Identifier(EVENTS_TABLE))
        guard = SQL("{0}.{1}").format(schema, Identifier(ARCHIVED_TABLE))
        snapshots = SQL("{0}.{1}").format(schema, Identifier(SNAPSHOTS_TABLE))
        ids = list(removal.versions)
        keys = aggregate_lock_keys(events.channel_name, ids)
        # Held: the read models' reads (``write_views``) run in this transaction too.
        with self._held_transaction() as curs:
            if len(keys) <= MAX_AGGREGATE_LOCKS:
                curs.execute(LOCK_AGGREGATES, (keys,))
            curs.execute(BEGIN_WIDE_WRITE, (events.writer_lock_key, events.channel_name))
            tombstone = removal.tombstone
            run_id, lookup_key = index_columns(tombstone)
            curs.execute(
                SQL(
                    "INSERT INTO {0} (originator_id, originator_version, topic, state, "
                    "run_id, lookup_key) VALUES (%s, %s, %s, %s, %s, %s) RETURNING position"
                ).format(table),
                (
                    as_uuid(tombstone.originator_id),
                    tombstone.originator_version,
                    tombstone.topic,
                    tombstone.state,
                    run_id,
                    lookup_key,
                ),
            )
            position: int = _first(curs)
            curs.execute(
                SQL("SELECT COALESCE(MAX(position), 0) FROM {0} WHERE position < %s").format(table),
                (position,),
            )
            head: int = _first(curs)
            curs.execute(
                SQL(
                    "SELECT originator_id, MAX(originator_version) AS version FROM {0} "
                    "WHERE run_id = ANY(%s) AND topic <> ALL(%s) GROUP BY originator_id"
                ).format(table),
                (list(removal.run_ids), list(TOMBSTONE_TOPICS)),
            )
            found = {row["originator_id"]: row["version"] for row in curs.fetchall()}
            if not same_tree(found, removal):
                raise TreeChangedError()
            curs.execute(
                SQL(
                    f"SELECT {LOG_COLUMNS} FROM {{0}} WHERE position > %s AND topic = %s "
                    "AND NOT run_id = ANY(%s)"
                ).format(table),
                (removal.judged_at, CREATED_TOPIC, list(removal.run_ids)),
            )
            # The log's payloads are packed: each run created since the judgement is asked
            # for its root here, not by SQL.
            created = [LogEntry(**row) for row in curs.fetchall()]
            if any(created_in_tree(entry, removal.root_run_id) for entry in created):
                raise TreeChangedError()
            curs.execute(
                SQL(
                    "INSERT INTO {0} (aggregate_id, archive_id) "
                    "SELECT unnest(%s::uuid[]), %s ON CONFLICT (aggregate_id) "
                    "DO UPDATE SET archive_id = EXCLUDED.archive_id"
                ).format(guard),
                (ids, removal.archive_id),
            )
            curs.execute(
                SQL("DELETE FROM {0} WHERE originator_id = ANY(%s::uuid[])").format(table),
                (ids,),
            )
            if curs.rowcount != removal.events:
                raise TreeChangedError()
            curs.execute(
                SQL("DELETE FROM {0} WHERE originator_id = ANY(%s::uuid[])").format(snapshots),
                (ids,),
            )
            try:
                written = write_views(curs, head, position)
            except psycopg.Error as error:
                if error.sqlstate != MOVED_SQLSTATE:
                    raise
                written = False
            if not written:
                raise ViewsMovedError()
            self._commit(curs, [position])
        return position

    def restore_tree(self, restoral: TreeRestoral) -> list[int]:
        """Put a pruned tree back in one transaction (``storage.archived``); returns the new
        positions of its events and, last, of the tombstone's ``run-tree.restored``.

        It writes alone, as a wide batch does: the log's writer lock exclusively (positions
        drawn with no other writer open, so followers' gap waits stay exact), then the guard
        rows out, then the events in their bundle order.
        """
        events = self._events
        schema = Identifier(self.schema)
        guard = SQL("{0}.{1}").format(schema, Identifier(ARCHIVED_TABLE))
        ids = restoral.aggregate_ids
        stored = [*restoral.events, restoral.restored]
        indexes = [index_columns(s) for s in stored]
        with self._held_transaction() as curs:
            curs.execute(BEGIN_WIDE_WRITE, (events.writer_lock_key, events.channel_name))
            curs.execute(
                SQL(
                    "DELETE FROM {0} WHERE archive_id = %s AND aggregate_id = ANY(%s::uuid[])"
                ).format(guard),
                (restoral.archive_id, ids),
            )
            if curs.rowcount != len(ids):
                raise GuardMovedError()
            curs.execute(
                events.insert_events_statement,
                [
                    *stored_event_arrays(stored),
                    TextArray([run_id for run_id, _ in indexes]),
                    TextArray([lookup_key for _, lookup_key in indexes]),
                ],
            )
            positions = sorted(row["notification_id"] for row in curs.fetchall())
            self._commit(curs, positions)
        return positions

    def archived_by(self, aggregate_id: UUID) -> UUID | None:
        """The tombstone aggregate of the pruned tree ``aggregate_id`` was in, if it was."""
        statement = SQL("SELECT archive_id FROM {0}.{1} WHERE aggregate_id = %s").format(
            Identifier(self.schema), Identifier(ARCHIVED_TABLE)
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, (aggregate_id,))
            row = curs.fetchone()
        return None if row is None else cast(UUID, row["archive_id"])

    def pool_usage(self) -> tuple[int, int, int | None]:
        """Pooled connections in use and idle, and calls waiting for one (for metrics)."""
        stats = self.datastore.pool.get_stats()
        size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
        return max(0, size - idle), idle, stats.get("requests_waiting", 0)

    @property
    def listen_conninfo(self) -> str | None:
        """What a LISTEN for other processes' commits connects with; None where no session
        can LISTEN (a transaction pooler without ``listen_url``): followers poll instead."""
        return self.datastore.settings.listen_conninfo

    @property
    def own_backends(self) -> frozenset[int]:
        """The server processes of this store's connections (``_ArrayRowsDatastore``)."""
        return self.datastore.own_backends

    @property
    def elects_projector(self) -> bool:
        """Whether the processes keeping the same read models elect one to project what
        commits alone (``projecting=elected``, the default; ``views.leadership``)."""
        return self.datastore.settings.projecting == "elected"

    @property
    def written(self) -> WrittenPositions:
        """Where this store's commits lie (``ReplicaReads``)."""
        return self.datastore.written

    @contextmanager
    def replica_reads(
        self, needed: ReadPosition, ready: Callable[[], bool] | None = None
    ) -> Iterator[bool]:
        """This thread's reads go to a replica that has replayed ``needed.lsn`` and on which
        ``ready()`` holds, for the block; False when there is none within ``replica_wait``
        (or no replica at all), and reads stay on the primary."""
        if self.replicas is None:
            yield False
            return

        def ready_on(connection: Connection[DictRow]) -> bool:
            if ready is None:
                return True
            with self.datastore.reading_on(connection):
                return ready()

        with self.replicas.reading(needed.lsn, ready_on) as connection:
            if connection is None:
                yield False
                return
            with self.datastore.reading_on(connection):
                yield True

    @property
    def reads_replicas(self) -> bool:
        return self.replicas is not None

    def read_from_replica(
        self, read: Callable[[], _R], needed: ReadPosition, ready: Callable[[], bool] | None = None
    ) -> _R:
        """``read()`` on a replica (``replica_reads``), or on the primary: when no replica
        has ``needed`` in time, or when the read fails there (a replica that went away, a
        read-model slot the replica has not replayed yet, a query cancelled by replay)."""
        on_replica = False
        try:
            with self.replica_reads(needed, ready) as on_replica:
                return read()
        except (psycopg.Error, PersistenceError) as error:
            if not on_replica:
                raise
            logger.warning("a read on a replica failed, the primary answers it: %s", error)
        return read()

    def close(self) -> None:
        """Close the connection pool and the replicas' connections."""
        if self.replicas is not None:
            self.replicas.close()
        self.datastore.close()
