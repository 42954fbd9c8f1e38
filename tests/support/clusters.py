"""Throwaway PostgreSQL clusters (and a PgBouncer in front of one) that tests make for
themselves, never the machine's own server.

A cluster runs ``initdb`` and ``pg_ctl`` from PostgreSQL 15 as the ``postgres`` OS user
(through ``runuser`` when the tests run as root) on a spare port of 127.0.0.1, with trust
authentication, in a temporary directory; its tests stop, crash, restart and reconfigure it at
will, and at the end it is stopped (by its data directory) and its directory removed. Without
the binaries the tests are skipped locally, and fail when ``CI`` is set.
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
from typing import Literal, TypeVar

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


def binaries_or_skip(*paths: Path) -> None:
    """Skip the test (fail it when ``CI`` is set) unless every binary exists."""
    for path in paths:
        if not path.exists():
            message = f"{path.name} not found at {path}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)


def owned_scratch_folder(prefix: str) -> Path:
    """A new temporary folder the ``postgres`` OS user owns (the servers run as that user)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    owner = pwd.getpwnam(OS_USER)
    if os.geteuid() == 0:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    return root


ClusterT = TypeVar("ClusterT", bound=ThrowawayCluster)


@contextlib.contextmanager
def throwaway(made: ClusterT, **settings: str) -> Iterator[ClusterT]:
    """``made`` initialised and started; stopped (as a crash) and removed afterwards."""
    try:
        made.init()
        made.start(**settings)
        yield made
    finally:
        if made.is_running():
            with contextlib.suppress(BaseException):
                made.stop("immediate")
        shutil.rmtree(made.root, ignore_errors=True)


PGBOUNCER = Path("/usr/sbin/pgbouncer")


class PgBouncer:
    """Debian's PgBouncer in transaction mode, on a spare port in front of one cluster.

    Settings are the ones a transaction-pooled deployment runs with (the README's): trust
    authentication here, ``ignore_startup_parameters`` for what libpq may send, and a small
    server pool so that a client's transactions really do move between server sessions.
    """

    def __init__(self, root: Path, server: ThrowawayCluster, *, pool_size: int = 8) -> None:
        self.root = root
        self.server = server
        self.port = free_port()
        self.pool_size = pool_size
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "pgbouncer.log"

    def start(self) -> None:
        """Write its configuration and start it; returns once it accepts connections."""
        auth = self.root / "users.txt"
        auth.write_text(f'"{OS_USER}" ""\n')
        ini = self.root / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.server.port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {auth}\n"
            f"admin_users = {OS_USER}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 500\n"
            f"default_pool_size = {self.pool_size}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.log}\n"
        )
        owner = pwd.getpwnam(OS_USER)
        if os.geteuid() == 0:
            for path in (auth, ini):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        prefix = ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []
        self.process = subprocess.Popen(
            [*prefix, str(PGBOUNCER), str(ini)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            with contextlib.suppress(psycopg.OperationalError), self.admin():
                return
            if self.process.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"], check=False)
        log = self.log.read_text() if self.log.exists() else ""
        pytest.fail(f"PgBouncer did not start: {log}")

    def stop(self) -> None:
        """Stop the process this test session started (by its id)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def url(self, database: str, *, query: str = "pooler=transaction") -> str:
        """A URL through the pooler, with the test password in it."""
        url = f"postgresql://{OS_USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"
        return f"{url}?{query}" if query else url

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """A connection to PgBouncer's own console (simple queries only)."""
        return psycopg.connect(
            f"host=127.0.0.1 port={self.port} dbname=pgbouncer user={OS_USER}",
            autocommit=True,
            prepare_threshold=None,
        )

    def disconnect(self, database: str) -> None:
        """Close every client and server connection of ``database`` (and take new ones)."""
        with self.admin() as admin:
            admin.execute(f'KILL "{database}"')
            admin.execute(f'RESUME "{database}"')


@contextlib.contextmanager
def pooled(server: ThrowawayCluster, root: Path, *, pool_size: int = 8) -> Iterator[PgBouncer]:
    """A running PgBouncer in front of ``server`` (its files in ``root``, which the
    ``postgres`` OS user must own); stopped afterwards."""
    binaries_or_skip(PGBOUNCER)
    bouncer = PgBouncer(root, server, pool_size=pool_size)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.stop()
