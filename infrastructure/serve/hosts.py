"""Refuse a request whose ``Host`` is not this server's: the defence against DNS rebinding.

A web page whose domain re-resolves to 127.0.0.1 can make the browser send requests to the
server, but the browser still names the attacker's domain in ``Host``. So a request must name
the address its connection arrived at (with that port), or a loopback name when that address
is a loopback one, or a name the operator allows (``--allowed-host``, or
``RUNLEDGER_SERVE_ALLOWED_HOSTS``). An IP literal cannot be re-bound, which is why the address
itself is always allowed. Starlette's ``TrustedHostMiddleware`` does not fit: it ignores the
port, splits ``[::1]:8765`` at the wrong colon and answers in plain text, not the API's JSON.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from runledger.infrastructure.serve.errors import error_response

ALLOWED_HOSTS_VARIABLE: Final = "RUNLEDGER_SERVE_ALLOWED_HOSTS"
HTTP_PORT: Final = 80
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
HOST_REFUSED_CODE: Final = "request.host-not-allowed"
HOST_REFUSED_MESSAGE: Final = (
    "The request's Host header names no address of this server; "
    "the operator can allow a name with --allowed-host"
)
INVALID_ALLOWED_HOST: Final = "Allowed host {given!r} is not a host name, optionally with :port"
_NAME: Final = re.compile(r"[a-z0-9._~!$&'()*+,;=%-]+")
_MAX_PORT: Final = 65535


class InvalidAllowedHostError(ValueError):
    """An operator's allowed host is not a host name (with an optional port)."""


Host = tuple[str, int | None]
"""A host name or address (lower case, IPv6 without brackets) and its port, if given."""


def parse_host(value: str) -> Host | None:
    """``value`` as ``Host`` header grammar reads it (RFC 9110 §7.2), or None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or not _is_ip(name, version=6):
            return None
        name = str(ipaddress.ip_address(name))
    else:
        name, colon, port_text = value.partition(":")
        if not _NAME.fullmatch(name) or ":" in port_text:
            return None
        rest = colon + port_text
    if not rest:
        return name, None
    port_text = rest.removeprefix(":")
    if rest[0] != ":" or not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
        return None
    port = int(port_text)
    return (name, port) if port <= _MAX_PORT else None


def _is_ip(text: str, *, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def allowed_hosts(given: Iterable[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The operator's allowed hosts, from the options then the environment variable (comma
    separated); ``InvalidAllowedHostError`` names one that is not a host."""
    listed = [*given, *env.get(ALLOWED_HOSTS_VARIABLE, "").split(",")]
    names: list[str] = []
    for entry in (item.strip() for item in listed):
        if not entry:
            continue
        if parse_host(entry) is None:
            raise InvalidAllowedHostError(INVALID_ALLOWED_HOST.format(given=entry))
        names.append(entry.lower())
    return tuple(dict.fromkeys(names))


def _local_address(server: Any) -> Host | None:
    """The address and port the connection arrived at (an IPv4-mapped address as IPv4)."""
    # ASGI gives (host, port); a server may add IPv6's flow info and scope id after them.
    if not isinstance(server, (tuple, list)) or len(server) < 2:
        return None
    address, port = server[0], server[1]
    if not isinstance(address, str) or not isinstance(port, int):
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address.lower(), port
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), port


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class HostCheck:
    """ASGI middleware answering 400 to a request whose ``Host`` this server does not own."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(host for host in map(parse_host, allowed) if host is not None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.allows(scope):
            await error_response(400, HOST_REFUSED_CODE, HOST_REFUSED_MESSAGE)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def allows(self, scope: Scope) -> bool:
        """Whether the request's one ``Host`` header names this server."""
        given = [value for key, value in scope["headers"] if key == b"host"]
        if len(given) != 1:
            return False
        host = parse_host(given[0].decode("latin-1"))
        if host is None:
            return False
        name, port = host
        if host in self.allowed or (name, None) in self.allowed:
            return True
        local = _local_address(scope.get("server"))
        if local is None:
            return False
        address, local_port = local
        if port != local_port and not (port is None and local_port == HTTP_PORT):
            return False
        return name == address or (_is_loopback(address) and name in LOOPBACK_NAMES)


__all__: Sequence[str] = [
    "ALLOWED_HOSTS_VARIABLE",
    "HOST_REFUSED_CODE",
    "HostCheck",
    "InvalidAllowedHostError",
    "allowed_hosts",
    "parse_host",
]
