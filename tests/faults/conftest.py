"""A throwaway PostgreSQL cluster for the fault tests, never the machine's own server.

The fixture runs ``initdb`` and ``pg_ctl`` from PostgreSQL 15 as the ``postgres`` OS user
(through ``runuser`` when the tests run as root) on a spare port of 127.0.0.1, with trust
authentication, in a temporary directory; the tests stop, crash, restart and reconfigure it
at will. At the end it stops that cluster (by its data directory) and removes the directory.
Without the binaries the tests are skipped locally, and fail when ``CI`` is set.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import psycopg
import pytest

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
OS_USER = "postgres"
PASSWORD = "fault-test-secret"
"""Put in every URL the tests use (trust ignores it): no message may ever show it."""
BASE_SETTINGS: Mapping[str, str] = {
    "listen_addresses": "127.0.0.1",
    "shared_buffers": "16MB",
    "max_connections": "40",
    # A crash (immediate stop) kills the server, not the machine: what reached the kernel is
    # kept, so skipping fsync keeps restarts quick without weakening what the tests check.
    # synchronous_commit stays on: an acknowledged commit is in the WAL.
    "fsync": "off",
    "full_page_writes": "off",
}


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ThrowawayCluster:
    """One PostgreSQL cluster this test session made, on its own port and directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()
        self.settings: dict[str, str] = {}

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []
        result = subprocess.run(
            [*prefix, *command], capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            pytest.fail(f"{' '.join(command)} failed: {result.stderr}{result.stdout}\n{log}")

    def init(self) -> None:
        """Make the cluster's data directory."""
        self._run(
            str(POSTGRES_BIN / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            OS_USER,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )

    def start(self, **settings: str) -> None:
        """Start the server, with ``settings`` over the base ones until the next start."""
        self.settings = {**BASE_SETTINGS, **settings, "port": str(self.port)}
        options = " ".join(f"-c {name}={value}" for name, value in self.settings.items())
        self._run(
            str(POSTGRES_BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"{options} -k {self.root}",
            "start",
        )

    def stop(self, mode: Literal["fast", "immediate"] = "fast") -> None:
        """Stop the server: ``fast`` ends sessions cleanly, ``immediate`` is a crash."""
        self._run(str(POSTGRES_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def is_running(self) -> bool:
        """Whether this cluster's postmaster is up."""
        return (self.data / "postmaster.pid").exists()

    def url(self, database: str = "postgres", *, user: str = OS_USER, query: str = "") -> str:
        """A URL to one of this cluster's databases, with the test password in it."""
        url = f"postgresql://{user}:{PASSWORD}@127.0.0.1:{self.port}/{database}"
        return f"{url}?{query}" if query else url

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit superuser connection to the maintenance database."""
        return psycopg.connect(
            f"host=127.0.0.1 port={self.port} dbname=postgres user={OS_USER}", autocommit=True
        )

    def create_database(self, name: str) -> str:
        """A new, empty database of this cluster, by URL."""
        with self.admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ThrowawayCluster]:
    """The session's throwaway cluster, running with the base settings."""
    if not (POSTGRES_BIN / "initdb").exists():
        message = f"PostgreSQL 15 binaries not found in {POSTGRES_BIN}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="runledger-faults-"))
    owner = pwd.getpwnam(OS_USER)
    if os.geteuid() == 0:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    made = ThrowawayCluster(root)
    try:
        made.init()
        made.start()
        yield made
    finally:
        if made.is_running():
            with contextlib.suppress(BaseException):
                made.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def running_cluster(cluster: ThrowawayCluster) -> Iterator[ThrowawayCluster]:
    """The cluster, up with the base settings before and after the test (whatever it did)."""
    if not cluster.is_running():
        cluster.start()
    yield cluster
    if cluster.is_running() and cluster.settings != {**BASE_SETTINGS, "port": str(cluster.port)}:
        cluster.stop()
    if not cluster.is_running():
        cluster.start()


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def database_url(running_cluster: ThrowawayCluster) -> str:
    """A new database of the running cluster, by a URL carrying the test password."""
    return running_cluster.create_database(f"faults_{next(_databases)}")
