"""``runledger serve`` as a user starts it: it prints where it listens and its token once,
stops cleanly on SIGTERM or SIGINT with its store closed, and never prints a password."""

from __future__ import annotations

import gc
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

from runledger.infrastructure import open_store
from runledger.infrastructure.serve import server
from runledger.infrastructure.storage.urls import redact_url
from tests.serve.conftest import TOKEN, Served

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


def start(url: str, env: dict[str, str] | None = None, *options: str) -> Running:
    environment = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    environment.pop("RUNLEDGER_SERVE_TOKEN", None)
    environment.update(env or {})
    command = [sys.executable, "-m", "runledger.infrastructure.cli", "serve", "--url", url]
    process = subprocess.Popen(
        [*command, "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    assert process.stdout is not None
    banner = [process.stdout.readline() for _ in range(3)]
    listening = re.search(r"(http://(?:127\.0\.0\.1|\[::1\]):\d+)/", banner[0])
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
        assert created.status_code == 201
        # A live stream must not keep the server from stopping.
        with client.stream("GET", "/runs/run-1/viewer?after_revision=1") as stream:
            # Held: an iterator dropped at once would close the stream before the signal.
            lines = stream.iter_lines()
            next(lines)
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


def run_serve(
    tmp_path: Path, *options: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``runledger serve`` run to its end (it must refuse to start) on a store in tmp_path."""
    environment = {**os.environ, "RUNLEDGER_URL": f"sqlite:///{tmp_path / 'runledger.db'}"}
    environment["COLUMNS"] = "200"  # one line is one line, however long the value named
    environment.pop("RUNLEDGER_SERVE_TOKEN", None)
    command = [sys.executable, "-m", "runledger.infrastructure.cli", "serve", "--port", "0"]
    return subprocess.run(
        [*command, *options],
        capture_output=True,
        text=True,
        timeout=STOP_SECONDS,
        env={**environment, **env},
    )


@pytest.mark.parametrize("token", ["jeton-été-secret", "token with spaces", "tab\there"])
def test_a_token_no_client_could_send_is_refused_at_start_with_exit_2(
    tmp_path: Path, token: str
) -> None:
    done = run_serve(tmp_path, env={"RUNLEDGER_SERVE_TOKEN": token})

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error [usage]: Invalid value: RUNLEDGER_SERVE_TOKEN must be visible ASCII, without "
        "spaces or accents (see 'runledger serve --help')"
    ]
    assert token not in done.stdout + done.stderr
    assert not (tmp_path / "runledger.db").exists(), "the store is not opened"


def test_a_malformed_allowed_host_is_refused_at_start_with_exit_2(tmp_path: Path) -> None:
    done = run_serve(
        tmp_path,
        "--allowed-host",
        "ok.example",
        env={"RUNLEDGER_SERVE_ALLOWED_HOSTS": "https://bad.example/"},
    )

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error [usage]: Invalid value: Allowed host 'https://bad.example/' is not a host name, "
        "optionally with :port (see 'runledger serve --help')"
    ]


def test_allowed_hosts_from_the_option_and_the_environment_are_served_others_refused(
    tmp_path: Path,
) -> None:
    env = {"RUNLEDGER_SERVE_TOKEN": GIVEN_TOKEN, "RUNLEDGER_SERVE_ALLOWED_HOSTS": "b.example"}
    running = start(f"sqlite:///{tmp_path / 'runledger.db'}", env, "--allowed-host", "a.example")
    headers = {"Authorization": f"Bearer {GIVEN_TOKEN}"}
    try:
        with httpx.Client(base_url=running.base_url, headers=headers, timeout=10) as client:
            answers = {
                host: client.get("/runs", headers={"Host": host}).status_code
                for host in ("a.example", "b.example:8080", "c.example", "127.0.0.1")
            }
            own = client.get("/runs").status_code
    finally:
        code, _, err = running.stop(signal.SIGTERM)

    assert answers == {"a.example": 200, "b.example:8080": 200, "c.example": 400, "127.0.0.1": 400}
    assert own == 200
    assert "; hosts allowed besides 127.0.0.1: a.example, b.example;" in running.banner[2]
    assert code == 0, err


def test_a_guess_in_latin_1_bytes_is_refused_not_a_server_error(served_memory: Served) -> None:
    guess = f"Bearer {TOKEN}\xe9".encode("latin-1")

    response = served_memory.anonymous.post("/runs", json={}, headers={b"Authorization": guess})

    assert response.status_code == 401


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
def test_on_the_ipv6_loopback_its_literal_and_loopback_names_are_served(tmp_path: Path) -> None:
    env = {"RUNLEDGER_SERVE_TOKEN": GIVEN_TOKEN}
    running = start(f"sqlite:///{tmp_path / 'runledger.db'}", env, "--host", "::1")
    port = urlsplit(running.base_url).port
    headers = {"Authorization": f"Bearer {GIVEN_TOKEN}"}
    hosts = [f"[::1]:{port}", f"[0:0::1]:{port}", f"localhost:{port}", f"127.0.0.1:{port}"]
    try:
        with httpx.Client(base_url=running.base_url, headers=headers, timeout=10) as client:
            own = client.get("/runs").status_code
            answers = {
                host: client.get("/runs", headers={"Host": host}).status_code for host in hosts
            }
            foreign = client.get("/runs", headers={"Host": f"attacker.example:{port}"})
    finally:
        code, _, err = running.stop(signal.SIGTERM)

    assert running.base_url.startswith("http://[::1]:")
    assert own == 200
    assert answers == dict.fromkeys(hosts, 200)
    assert (foreign.status_code, foreign.json()["code"]) == (400, "request.host-not-allowed")
    assert code == 0, err


def test_the_server_freezes_its_startup_heap_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full collections walking startup's modules paused requests for 18-43 ms
    (``collector.freeze_heap``): by the time uvicorn serves, they are frozen."""
    if gc.get_freeze_count():
        pytest.skip("this worker's heap was frozen by an earlier test")
    url = f"sqlite:///{tmp_path / 'frozen.db'}"
    open_store(url).close()
    frozen_when_serving: list[int] = []
    monkeypatch.setattr(
        server._StoppingServer,
        "run",
        lambda self, sockets=None: frozen_when_serving.append(gc.get_freeze_count()),
    )
    try:
        server.serve(server.ServeOptions(url=url, port=0), lambda line: None, {})
    finally:
        gc.unfreeze()

    assert len(frozen_when_serving) == 1
    assert frozen_when_serving[0] > 10_000, "startup's modules alone are tens of thousands"
