"""A throwaway primary and its streaming replica, never the machine's own server.

The primary is ``tests/faults``' ``ThrowawayCluster`` (initdb's trust rules admit replication
from 127.0.0.1; PostgreSQL 15's defaults already have ``wal_level=replica`` and WAL senders);
the replica is a ``pg_basebackup -R`` of it on another spare port, a hot standby that streams
from it. Tests stop the replica or pause its replay at will; each test gets both running and
replaying again. Without the binaries the tests are skipped locally, and fail when ``CI`` is
set.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.clusters import OS_USER, POSTGRES_BIN, ThrowawayCluster

REPLICATION_SETTINGS = {"wal_level": "replica", "max_wal_senders": "4"}


class ReplicaCluster(ThrowawayCluster):
    """A hot standby made from a base backup of a running primary."""

    def clone(self, primary: ThrowawayCluster) -> None:
        """Copy the primary (``-R``: with the settings to stream from it, as a standby)."""
        self._run(
            str(POSTGRES_BIN / "pg_basebackup"),
            "-D",
            str(self.data),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            OS_USER,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        )

    def pause_replay(self) -> None:
        """Stop replaying the primary's WAL (it still arrives): the replica lags on purpose."""
        with self.admin() as admin:
            admin.execute("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        """Replay again."""
        with self.admin() as admin:
            admin.execute("SELECT pg_wal_replay_resume()")

    def replayed(self) -> int:
        """How far it has replayed, in WAL bytes."""
        with self.admin() as admin:
            row = admin.execute(
                "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::text"
            ).fetchone()
        return int(str(row[0])) if row and row[0] is not None else 0


@dataclass
class ReplicatedDatabase:
    """One database of the primary, seen on the replica too."""

    primary: ThrowawayCluster
    replica: ReplicaCluster
    name: str

    @property
    def primary_url(self) -> str:
        """The database on the primary alone."""
        return self.primary.url(self.name)

    def url(self, *, replica_wait: float = 0.05) -> str:
        """The database on the primary, reading from the replica."""
        replica = quote(self.replica.url(self.name), safe="")
        return self.primary.url(
            self.name, query=f"replica_url={replica}&replica_wait={replica_wait:g}"
        )

    def wait_for_replica(self, timeout: float = 30.0) -> None:
        """Until the replica has replayed everything the primary has written now."""
        with self.primary.admin() as admin:
            row = admin.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::text").fetchone()
        target = int(str(row[0])) if row else 0
        deadline = time.monotonic() + timeout
        while self.replica.replayed() < target:
            if time.monotonic() > deadline:
                pytest.fail("the replica did not catch up with the primary")
            time.sleep(0.01)


@pytest.fixture(scope="session")
def replicated_clusters() -> Iterator[tuple[ThrowawayCluster, ReplicaCluster]]:
    """The session's primary and replica."""
    if not (POSTGRES_BIN / "pg_basebackup").exists():
        message = f"PostgreSQL 15 binaries not found in {POSTGRES_BIN}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="runledger-replicas-"))
    owner = pwd.getpwnam(OS_USER)
    made: list[ThrowawayCluster] = []
    if os.geteuid() == 0:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    try:
        for name in ("primary", "replica"):
            (root / name).mkdir()
            if os.geteuid() == 0:
                os.chown(root / name, owner.pw_uid, owner.pw_gid)
        primary = ThrowawayCluster(root / "primary")
        made.append(primary)
        primary.init()
        primary.start(**REPLICATION_SETTINGS)
        replica = ReplicaCluster(root / "replica")
        made.append(replica)
        replica.clone(primary)
        replica.start()
        yield primary, replica
    finally:
        for cluster in reversed(made):
            if cluster.is_running():
                with contextlib.suppress(BaseException):
                    cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def replicated(
    replicated_clusters: tuple[ThrowawayCluster, ReplicaCluster],
) -> Iterator[ReplicatedDatabase]:
    """A new database on the primary, already on the replica; both running and replaying
    before and after the test, whatever it did."""
    primary, replica = replicated_clusters
    if not replica.is_running():
        replica.start()
    database = ReplicatedDatabase(primary, replica, f"replicas_{next(_databases)}")
    primary.create_database(database.name)
    database.wait_for_replica()
    yield database
    if not replica.is_running():
        replica.start()
    replica.resume_replay()
