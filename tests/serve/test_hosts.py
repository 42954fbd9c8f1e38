"""A request must name this server in ``Host``: a re-bound domain gets a 400, never data."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from runledger.infrastructure.serve.hosts import (
    InvalidAllowedHostError,
    allowed_hosts,
    parse_host,
)
from tests.serve.conftest import Served, SharedHost, serving, started_run

REFUSED = {
    "code": "request.host-not-allowed",
    "message": "The request's Host header names no address of this server; "
    "the operator can allow a name with --allowed-host",
}


def port_of(served: Served) -> int:
    port = urlsplit(served.base_url).port
    assert port is not None
    return port


def get(client: httpx.Client, path: str, host: str) -> httpx.Response:
    return client.get(path, headers={"Host": host})


@pytest.fixture
def public_reads(shared_host: SharedHost, serve_url: str) -> Iterator[Served]:
    yield from serving(shared_host, serve_url, public_reads=True)


@pytest.fixture
def allowing(shared_host: SharedHost) -> Iterator[Served]:
    allowed = ("runledger.example", "viewer.example:8443")
    yield from serving(shared_host, "memory://", allowed_hosts=allowed)


def test_under_public_reads_a_rebound_name_gets_400_and_no_event(public_reads: Served) -> None:
    started_run(public_reads.api)
    port = port_of(public_reads)

    rebound = get(public_reads.anonymous, "/events", f"attacker.example:{port}")
    own = get(public_reads.anonymous, "/events", f"127.0.0.1:{port}")

    assert (rebound.status_code, rebound.json()) == (400, REFUSED)
    assert own.status_code == 200
    assert [event["wire_name"] for event in own.json()][:1] == ["run.created"]


def test_every_route_refuses_a_foreign_host_even_with_the_token(served_memory: Served) -> None:
    started_run(served_memory.api)
    client = served_memory.api.client
    host = f"attacker.example:{port_of(served_memory)}"

    answers = [
        get(client, path, host)
        for path in ("/", "/openapi.json", "/runs", "/runs/run-1/viewer", "/runs/nope")
    ]
    written = client.post("/runs/run-1/pause", json={}, headers={"Host": host})

    assert [answer.status_code for answer in [*answers, written]] == [400] * 6
    assert all(answer.json() == REFUSED for answer in answers)
    assert served_memory.store.get_run("run-1").paused is False  # type: ignore[union-attr]


def test_the_bound_address_and_loopback_names_are_served_on_the_bound_port_only(
    served_memory: Served,
) -> None:
    port = port_of(served_memory)
    client = served_memory.api.client
    hosts = {
        f"127.0.0.1:{port}": 200,
        f"localhost:{port}": 200,
        f"LocalHost:{port}": 200,
        f"[::1]:{port}": 200,
        f"localhost:{port + 1}": 400,
        "localhost": 400,
        f"127.0.0.2:{port}": 400,
        f"localhost.attacker.example:{port}": 400,
        f"127.0.0.1:{port}:{port}": 400,
        f"127.0.0.1@attacker.example:{port}": 400,
    }

    answers = {host: get(client, "/runs", host).status_code for host in hosts}

    assert answers == hosts


def test_names_the_operator_allows_are_served_on_any_port_or_the_one_given(
    allowing: Served,
) -> None:
    client = allowing.api.client
    hosts = {
        "runledger.example": 200,
        "runledger.example:443": 200,
        "viewer.example:8443": 200,
        "viewer.example": 400,
        "viewer.example:443": 400,
        "sub.runledger.example": 400,
        f"127.0.0.1:{port_of(allowing)}": 200,
    }

    answers = {host: get(client, "/runs", host).status_code for host in hosts}

    assert answers == hosts


def raw_status(served: Served, request: bytes) -> int:
    """The status line's code of a request written to the server's socket as given."""
    parts = urlsplit(served.base_url)
    with socket.create_connection((parts.hostname or "", port_of(served)), timeout=10) as sock:
        sock.sendall(request)
        answer = sock.makefile("rb").readline()
    return int(answer.split()[1])


def test_a_request_without_one_host_header_is_refused(served_memory: Served) -> None:
    port = port_of(served_memory)
    own = f"Host: 127.0.0.1:{port}\r\n".encode()

    without = raw_status(served_memory, b"GET /openapi.json HTTP/1.0\r\n\r\n")
    twice = raw_status(served_memory, b"GET /openapi.json HTTP/1.0\r\n" + own * 2 + b"\r\n")
    once = raw_status(served_memory, b"GET /openapi.json HTTP/1.0\r\n" + own + b"\r\n")

    assert (without, twice, once) == (400, 400, 200)


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("Example.COM", ("example.com", None)),
        ("example.com:8765", ("example.com", 8765)),
        ("[::1]:8765", ("::1", 8765)),
        ("[0:0::1]", ("::1", None)),
        ("127.0.0.1:65535", ("127.0.0.1", 65535)),
        ("127.0.0.1:65536", None),
        ("::1", None),
        ("[example.com]:80", None),
        ("[::1]8765", None),
        ("example.com:", None),
        ("example.com:+80", None),
        ("exa mple.com", None),
        ("example.com/path", None),
        ("", None),
    ],
)
def test_a_host_is_read_as_the_host_header_grammar_says(
    given: str, parsed: tuple[str, int | None] | None
) -> None:
    assert parse_host(given) == parsed


def test_allowed_hosts_come_from_the_options_then_the_environment() -> None:
    env = {"RUNLEDGER_SERVE_ALLOWED_HOSTS": " b.example , ,A.example:81"}

    assert allowed_hosts(["a.example:81", "c.example"], env) == (
        "a.example:81",
        "c.example",
        "b.example",
    )
    with pytest.raises(
        InvalidAllowedHostError, match=r"^Allowed host 'https://a\.example' is not a host"
    ):
        allowed_hosts(["https://a.example"], {})
