"""``runledger serve`` as a user starts it: it prints where it listens and its token once,
stops cleanly on SIGTERM or SIGINT with its store closed, and never prints a password."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from runledger.infrastructure.storage.urls import redact_url

SECRET = "serve-secret-never-shown"
GIVEN_TOKEN = "given-token-never-shown"
STOP_SECONDS = 15


@dataclass
class Running:
    """A ``runledger serve`` process and what it printed on starting."""

    process: subprocess.Popen[str]
    banner: list[str]
    base_url: str
    token: str

    def stop(self, sig: signal.Signals) -> tuple[int, str, str]:
        """Send ``sig``; the exit code and the rest of its output."""
        self.process.send_signal(sig)
        out, err = self.process.communicate(timeout=STOP_SECONDS)
        return self.process.returncode, out, err


def start(url: str, env: dict[str, str] | None = None) -> Running:
    environment = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    environment.pop("RUNLEDGER_SERVE_TOKEN", None)
    environment.update(env or {})
    command = [sys.executable, "-m", "runledger.infrastructure.cli", "serve", "--url", url]
    process = subprocess.Popen(
        [*command, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    assert process.stdout is not None
    banner = [process.stdout.readline() for _ in range(3)]
    listening = re.search(r"(http://127\.0\.0\.1:\d+)/", banner[0])
    if listening is None:
        process.kill()
        raise AssertionError(f"no banner: {banner} {process.communicate()}")
    token = banner[1].removeprefix("token: ").strip()
    return Running(process, banner, listening.group(1), token)


@pytest.fixture
def running_sqlite(tmp_path: Path) -> Iterator[tuple[Running, Path]]:
    path = tmp_path / "runledger.db"
    running = start(f"sqlite:///{path}", {"RUNLEDGER_SERVE_TOKEN": GIVEN_TOKEN})
    yield running, path
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait()


def test_sigterm_stops_the_server_with_exit_0_and_closes_the_store(
    running_sqlite: tuple[Running, Path],
) -> None:
    running, path = running_sqlite
    headers = {"Authorization": f"Bearer {GIVEN_TOKEN}"}
    with httpx.Client(base_url=running.base_url, headers=headers, timeout=10) as client:
        created = client.post("/runs", json={"run_id": "run-1", "workflow_name": "e", "input": {}})
        assert created.status_code == 200
        # A live stream must not keep the server from stopping.
        with client.stream("GET", "/runs/run-1/viewer?after_revision=1") as stream:
            next(stream.iter_lines())
            code, out, err = running.stop(signal.SIGTERM)

    assert code == 0, err
    assert out.strip().splitlines()[-1] == "runledger serve: stopped, store closed"
    assert running.banner[1].strip() == "token: from RUNLEDGER_SERVE_TOKEN"
    assert GIVEN_TOKEN not in "".join(running.banner) + out + err
    # SQLite removes the write-ahead log when the last connection to the file closes.
    assert not Path(f"{path}-wal").exists()


@pytest.mark.postgres
def test_sigint_on_postgresql_closes_every_connection_and_no_output_has_the_password(
    postgres_store_url: str,
) -> None:
    parts = urlsplit(postgres_store_url)
    netloc = f"{parts.username}:{SECRET}@{parts.hostname}:{parts.port}"
    url = urlunsplit(parts._replace(netloc=netloc))
    running = start(url)
    headers = {"Authorization": f"Bearer {running.token}"}
    with httpx.Client(base_url=running.base_url, headers=headers, timeout=10) as client:
        missing = client.get("/runs/run-1")
        client.post("/runs", json={"run_id": "run-1", "workflow_name": "e", "input": {}})
        listed = client.get("/runs")

    code, out, err = running.stop(signal.SIGINT)

    assert code == 0, err
    printed = "".join(running.banner) + out + err
    assert SECRET not in printed + missing.text + listed.text
    assert len(running.token) >= 32
    assert printed.count(running.token) == 1, "a generated token is printed once"
    assert redact_url(url) in running.banner[0]
    assert connections_left(postgres_store_url) == 0, "the server left connections open"


def connections_left(url: str) -> int:
    """Connections to the database other than this one, once closed ones had time to go."""
    database = urlsplit(url).path.lstrip("/")
    deadline = time.monotonic() + 5
    with psycopg.connect(url, autocommit=True) as admin:
        while True:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
            left = int(row[0]) if row else 0
            # A backend exits a moment after its client hung up.
            if left == 0 or time.monotonic() > deadline:
                return left
            time.sleep(0.05)


def test_a_taken_port_is_a_clear_error_with_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "runledger.infrastructure.cli", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=STOP_SECONDS,
            env={**os.environ, "RUNLEDGER_URL": f"sqlite:///{tmp_path / 'runledger.db'}"},
        )

    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runledger.db").exists(), "the store is not opened"
