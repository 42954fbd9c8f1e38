"""Reads from PostgreSQL streaming replicas, with read-your-writes.

A replica replays the primary's write-ahead log in the primary's commit order, so what it
shows is always a *prefix* of what the primary committed: everything up to its replay
position (``pg_last_wal_replay_lsn()``), nothing after. A commit whose record lies at or
below that position is visible there with every commit before it.

So a reader needs one number per write it must see: a WAL position at or past the write's
commit record. A command learns it in the commit's own round trip (``WAL_AFTER_COMMIT``,
sent right behind ``COMMIT``); the store keeps the highest it wrote, and a host carries it
to another process as a *position token* (``ReadPosition.token``). A query then picks a
replica that has replayed that far; it polls the replicas for up to ``replica_wait``
seconds, and past that it reads the primary, which has everything.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

import psycopg
from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from runledger.domain.errors import InvalidPositionTokenError

logger = logging.getLogger(__name__)
T = TypeVar("T")

WAL_AFTER_COMMIT: Final = b"SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn AS lsn"
"""Sent right after ``COMMIT`` in the same pipeline: the insert position then lies past the
commit record (it lies past every record inserted so far). ``pg_current_wal_lsn()`` would not
do: it is where WAL has been *written* to, and a commit with ``synchronous_commit = off`` may
not be written yet. Before ``COMMIT`` either would be short of the commit record."""

REPLAYED: Final = b"SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn AS lsn"
"""How far a replica has replayed, in bytes; NULL on a server that is not replaying (a
primary, or a replica since promoted: its positions no longer follow the primary's)."""

DOWN_SECONDS: Final = 1.0
"""How long a replica that refused a connection is passed over before it is tried again: a
query must not pay a failed connection attempt each time while one is down."""

POLL_SECONDS: Final = 0.002
"""Between two looks at the replicas' replay positions while a query waits."""

TOKEN_VERSION: Final = "rl1"  # noqa: S105 (a format's name, no secret)
_TOKEN: Final = re.compile(rf"{TOKEN_VERSION}\.([0-9a-f]{{1,16}})\.([0-9a-f]{{1,16}})")


@dataclass(frozen=True)
class ReadPosition:
    """What a read must see: a WAL position (``lsn``, in bytes) and a log position."""

    lsn: int = 0
    position: int = 0

    def merged(self, other: ReadPosition) -> ReadPosition:
        """The position that covers both."""
        return ReadPosition(max(self.lsn, other.lsn), max(self.position, other.position))

    def token(self) -> str:
        """The position as an opaque text token (``rl1.<lsn>.<position>``, hexadecimal)."""
        return f"{TOKEN_VERSION}.{self.lsn:x}.{self.position:x}"

    @classmethod
    def from_token(cls, token: object) -> ReadPosition:
        """The position a token carries, or ``InvalidPositionTokenError``."""
        if not isinstance(token, str):
            raise InvalidPositionTokenError(token=token, problem="a token is text")
        matched = _TOKEN.fullmatch(token)
        if matched is None:
            raise InvalidPositionTokenError(
                token=token, problem="not a token that position_token() returned"
            )
        return cls(int(matched.group(1), 16), int(matched.group(2), 16))


class WrittenPositions:
    """The highest position this store's commits reached (threads commit concurrently).

    A commit may be noted without its WAL position (``lsn`` None): then the next look at
    ``current`` reads the WAL insert position (``read_lsn``), which, read after the commit,
    lies past its commit record. A store that reads no replica itself saves a statement per
    command so, and pays it only when a position token is asked for.
    """

    def __init__(self, read_lsn: Callable[[], int] | None = None) -> None:
        self._lock = threading.Lock()
        self._current = ReadPosition()
        self._read_lsn = read_lsn
        self._unread = False

    @property
    def current(self) -> ReadPosition:
        """Covers every commit noted so far."""
        if self._unread and self._read_lsn is not None:
            # Cleared first: a commit noted during the read sets it again, for the next look.
            with self._lock:
                self._unread = False
            lsn = self._read_lsn()
            with self._lock:
                self._current = self._current.merged(ReadPosition(lsn, 0))
        return self._current

    def advance(self, lsn: int | None, position: int) -> None:
        """Note a commit at WAL position ``lsn`` (None: not read) whose events reached log
        ``position``."""
        with self._lock:
            if lsn is None:
                self._unread = True
            self._current = self._current.merged(ReadPosition(lsn or 0, position))


@runtime_checkable
class ReplicaReads(Protocol):
    """Storage that knows its commits' positions and may answer reads from replicas."""

    @property
    def written(self) -> WrittenPositions:
        """The positions of this store's own commits."""

    @property
    def reads_replicas(self) -> bool:
        """Whether reads may go to replicas (``replica_url``): else every read is the
        primary's."""

    def read_from_replica(
        self, read: Callable[[], T], needed: ReadPosition, ready: Callable[[], bool] | None = None
    ) -> T:
        """``read()`` on a replica that has ``needed`` (and on which ``ready()`` holds), or
        on the primary when none has it in time or the replica fails the read."""


class _Replica:
    """One replica: its idle connections, and since when it refuses connections."""

    def __init__(self, conninfo: str, endpoint: str, *, keep: int, prepare: bool) -> None:
        self.conninfo = conninfo
        self.endpoint = endpoint
        self._keep = keep
        self._prepare = prepare
        self._idle: list[Connection[DictRow]] = []
        self._lock = threading.Lock()
        self.down_until = 0.0

    def take(self) -> Connection[DictRow] | None:
        """An idle or new connection, or None while the replica is down."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        if time.monotonic() < self.down_until:
            return None
        try:
            connection = psycopg.connect(self.conninfo, autocommit=True, row_factory=dict_row)
        except psycopg.Error as error:
            self.down(error)
            return None
        if not self._prepare:
            # Behind a transaction-mode pooler, as the primary may be.
            connection.prepare_threshold = None
        return connection

    def down(self, error: BaseException) -> None:
        """Pass this replica over for a while."""
        if time.monotonic() >= self.down_until:
            logger.warning("replica %s unavailable, reads go elsewhere: %s", self.endpoint, error)
        self.down_until = time.monotonic() + DOWN_SECONDS

    def give_back(self, connection: Connection[DictRow]) -> None:
        """Keep the connection for the next read, or close it when enough are kept."""
        if connection.closed or connection.info.transaction_status != TransactionStatus.IDLE:
            connection.close()
            return
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


@dataclass
class ReplicaStats:
    """Counters of the reads that looked for a replica (increments under the GIL)."""

    replica: int = 0
    """Reads a replica answered."""
    waited: int = 0
    """Of those, reads that waited for a replica to replay their position first."""
    primary: int = 0
    """Reads that went to the primary: no replica had their position within the wait."""


class ReplicaSet:
    """The replicas of one store, and the choice of one for a read."""

    def __init__(
        self,
        conninfos: Sequence[str],
        endpoints: Sequence[str],
        *,
        wait: float,
        keep: int,
        prepare: bool = True,
    ) -> None:
        self.wait = wait
        self._replicas = [
            _Replica(conninfo, endpoint, keep=keep, prepare=prepare)
            for conninfo, endpoint in zip(conninfos, endpoints, strict=True)
        ]
        self._turn = 0
        self.stats = ReplicaStats()

    def _in_turn(self) -> list[_Replica]:
        # Each read starts at the next replica, so reads spread over all that are caught up.
        self._turn = (self._turn + 1) % len(self._replicas)
        return self._replicas[self._turn :] + self._replicas[: self._turn]

    @staticmethod
    def _has(
        connection: Connection[DictRow],
        lsn: int,
        ready: Callable[[Connection[DictRow]], bool],
    ) -> bool:
        row = connection.execute(REPLAYED).fetchone()
        replayed = None if row is None else row["lsn"]
        return replayed is not None and replayed >= lsn and ready(connection)

    def _look(
        self, lsn: int, ready: Callable[[Connection[DictRow]], bool]
    ) -> tuple[_Replica, Connection[DictRow]] | None:
        """A replica that has ``lsn`` and is ready now, with a connection to it."""
        for replica in self._in_turn():
            connection = replica.take()
            if connection is None:
                continue
            try:
                if self._has(connection, lsn, ready):
                    return replica, connection
            except psycopg.Error as error:
                connection.close()
                if isinstance(error, psycopg.OperationalError):
                    replica.down(error)
                continue
            replica.give_back(connection)
        return None

    def _any_up(self) -> bool:
        now = time.monotonic()
        return any(replica.down_until <= now for replica in self._replicas)

    @contextmanager
    def reading(
        self, lsn: int, ready: Callable[[Connection[DictRow]], bool]
    ) -> Iterator[Connection[DictRow] | None]:
        """A connection to a replica that has replayed ``lsn`` and is ``ready``, waiting up
        to ``wait`` seconds for one; None when none has, for the read to go to the primary.

        A failure of the read on the replica closes the connection and passes through: the
        caller reads the primary instead.
        """
        deadline = time.monotonic() + self.wait
        found = self._look(lsn, ready)
        waited = False
        # Waiting is for replicas that replay; one that is down is passed over at once.
        while found is None and time.monotonic() < deadline and self._any_up():
            waited = True
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            found = self._look(lsn, ready)
        if found is None:
            self.stats.primary += 1
            yield None
            return
        replica, connection = found
        self.stats.replica += 1
        self.stats.waited += waited
        try:
            yield connection
        except BaseException as error:
            connection.close()
            if isinstance(error, psycopg.OperationalError):
                replica.down(error)
            raise
        replica.give_back(connection)

    def close(self) -> None:
        """Close every replica's idle connections."""
        for replica in self._replicas:
            replica.close()


WAL_PAGE_BYTES: Final = 8192
"""PostgreSQL's WAL page size (``XLOG_BLCKSZ``, a build option nobody changes)."""
WAL_PAGE_HEADER_BYTES: Final = 24
"""The header of a WAL page that does not start a segment (``SizeOfXLogShortPHD``)."""


def lsn_of(row: Any) -> int:
    """The WAL position in a row of ``WAL_AFTER_COMMIT`` (0 when there is none)."""
    if row is None:
        return 0
    value = int((row["lsn"] if isinstance(row, dict) else row[0]) or 0)
    if value % WAL_PAGE_BYTES == WAL_PAGE_HEADER_BYTES:
        # The insert position skips the header of the page it stands at, while a replica's
        # replay position stops at the end of the last record: when that record ended at
        # the page boundary, the replica would never reach the position on an idle server.
        # No record ends inside a page header, so the boundary covers the same commits.
        return value - WAL_PAGE_HEADER_BYTES
    return value


__all__: Sequence[str] = [
    "REPLAYED",
    "WAL_AFTER_COMMIT",
    "ReadPosition",
    "ReplicaReads",
    "ReplicaSet",
    "ReplicaStats",
    "WrittenPositions",
    "lsn_of",
]
