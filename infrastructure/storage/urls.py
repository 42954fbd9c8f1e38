"""Store URLs: how any of them is printed, which SQLite file one names, and what runledger
reads from a PostgreSQL one.

A PostgreSQL URL may carry runledger's parameters in its query: the pool's (``pool_size``,
``max_overflow``, ``connect_timeout``, ``pool_timeout``) and the deployment's (``pooler``,
``listen_url``, ``replica_url`` — repeatable — ``replica_wait``, ``projecting``); they are
taken out before the URL reaches libpq, which takes every other parameter of its own (``sslmode``,
``application_name``, …). A parameter neither knows is refused, so a typo never goes
unnoticed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Conninfo

from runledger.domain.errors import (
    InvalidStoreLocationError,
    InvalidStoreParameterError,
    InvalidStorePathError,
    InvalidStoreUrlError,
    StoreNotFoundError,
    WorkflowError,
)

REDACTED: Final = "***"

SQLITE_PREFIX: Final = "sqlite:///"
"""What a SQLite store URL starts with; the path follows (``sqlite:////abs`` is absolute)."""


def store_url(location: object) -> str:
    """The URL a store location names: a URL as it is, a file path (text without a scheme,
    or an ``os.PathLike``) as the SQLite file there."""
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str):
        raise InvalidStoreLocationError(kind=type(location).__name__)
    return location if "://" in location else SQLITE_PREFIX + location


def _relative_hint(path: str) -> str:
    # Three slashes and then a relative path is easy to write by mistake for an absolute one.
    if os.path.isabs(path):
        return ""
    return (
        f" (sqlite:/// and a relative path is read from the current folder {os.getcwd()}; "
        "sqlite://// and a path is absolute)"
    )


def sqlite_path(url: str, *, create: bool = True) -> str:
    """The file a ``sqlite:///`` URL names, checked: a path, in a folder that exists, and
    (unless ``create``) a file that exists already."""
    path = url.removeprefix(SQLITE_PREFIX)
    shown = redact_url(url)
    if path == ":memory:" or path.startswith("file:"):
        return path
    if not path:
        raise InvalidStorePathError(
            url=shown, reason="the URL names no file (sqlite:///state.db is state.db here)"
        )
    if path.endswith("/") or os.path.isdir(path):
        raise InvalidStorePathError(url=shown, reason="the path names a folder, not a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InvalidStorePathError(
            url=shown, reason=f"the folder {folder} does not exist{_relative_hint(path)}"
        )
    if not create and not os.path.exists(path):
        raise StoreNotFoundError(
            url=shown,
            reason=f"the file {os.path.abspath(path)} does not exist{_relative_hint(path)}",
        )
    return path


def redact_url(url: str) -> str:
    """``url`` with its password (in the user info or a ``password`` parameter) as ``***``.

    Every URL that is printed, logged, put in an error or a ``repr`` goes through here. It
    works on the text, so even a URL no parser accepts is printed without its password.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    userinfo, at, hosts = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.partition(':')[0]}:{REDACTED}@{hosts}"
    path, question, query = tail.partition("?")
    if question:
        query, hash_mark, fragment = query.partition("#")
        fields = [_redacted_field(field) for field in query.split("&")]
        tail = f"{path}?{'&'.join(fields)}{hash_mark}{fragment}"
    return f"{scheme}://{authority}{tail}"


_URL_IN_TEXT: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


def redact_urls(text: str) -> str:
    """``text`` with every URL in it redacted (``redact_url``): any exception's text may
    carry a URL, and its password."""
    return _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)


def _redacted_field(field: str) -> str:
    name, equals, value = field.partition("=")
    if unquote(name).lower() == "password":
        return f"{name}={REDACTED}"
    decoded = unquote(value)
    if "://" in decoded:
        # A URL inside a parameter (listen_url=, replica_url=) has a password of its own.
        return f"{name}{equals}{quote(redact_url(decoded), safe=':/@*')}"
    return field


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _natural_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(text)
    return value


def _natural_seconds(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return value


REPEATABLE_PARAMETERS: Final = frozenset({"replica_url"})
"""runledger's parameters that may be given more than once (each value is kept, in order)."""

POOLER_MODES: Final = ("none", "session", "transaction")
"""What may sit between runledger and the server: nothing, or a pooler in session mode (both
are a direct connection to runledger), or a pooler in transaction mode."""


def _pooler(text: str) -> str:
    if text not in POOLER_MODES:
        raise ValueError(text)
    return text


PROJECTING_MODES: Final = ("elected", "every")
"""Who projects the commits that did not take their read models with them: one process of
those keeping the same read models, elected (``views.leadership``), or every process."""


def _projecting(text: str) -> str:
    if text not in PROJECTING_MODES:
        raise ValueError(text)
    return text


def _listen_url(text: str) -> str:
    # Checked now, so a wrong one fails at open and not later in a thread that only logs.
    if not text.startswith(("postgresql://", "postgres://")):
        raise ValueError(text)
    try:
        conninfo_to_dict(libpq_url(text))
    except psycopg.ProgrammingError as error:
        raise ValueError(text) from error
    return text


def _replica_url(text: str) -> str:
    # Checked at open: a replica that cannot be read would otherwise only ever be logged as
    # unavailable while every query quietly reads the primary.
    if not text.startswith(("postgresql://", "postgres://")):
        raise ValueError(text)
    try:
        conninfo_to_dict(libpq_url(text))
    except (psycopg.ProgrammingError, WorkflowError) as error:
        raise ValueError(text) from error
    return text


POOL_PARAMETERS: Final[Mapping[str, tuple[Callable[[str], Any], str]]] = {
    "pool_size": (_positive_int, "a whole number of at least 1"),
    "max_overflow": (_natural_int, "a whole number of at least 0"),
    "connect_timeout": (_positive_int, "whole seconds, at least 1"),
    "pool_timeout": (_positive_seconds, "seconds above 0"),
    "pooler": (_pooler, "one of " + ", ".join(POOLER_MODES)),
    "listen_url": (
        _listen_url,
        "a postgresql:// URL (percent-encoded) of a session that may LISTEN: the server "
        "itself or a pooler in session mode",
    ),
    "replica_url": (
        _replica_url,
        "a postgresql:// URL (percent-encoded) of a streaming replica (hot standby) of the "
        "store's server",
    ),
    "replica_wait": (_natural_seconds, "seconds, at least 0"),
    "projecting": (_projecting, "one of " + ", ".join(PROJECTING_MODES)),
}
"""runledger's query parameters: how each is read, and what it must be."""


@dataclass(frozen=True)
class PostgresSettings:
    """A PostgreSQL store URL, read: libpq's connection string and runledger's pool knobs."""

    # The connection string and the password stay out of the repr: it may be logged.
    conninfo: str = field(repr=False)
    """What libpq connects with: the URL without runledger's parameters, plus the timeout."""
    host: str
    port: str
    dbname: str
    user: str
    password: str = field(repr=False)
    pool_size: int = 5
    """Connections the pool keeps open."""
    max_overflow: int = 10
    """Connections it may open beyond ``pool_size`` under load."""
    connect_timeout: int = 5
    """Seconds one connection attempt may take (libpq's own ``connect_timeout``)."""
    pool_timeout: float = 5.0
    """Seconds a call waits for a free pooled connection before it fails."""
    pooler: str = "none"
    """``transaction`` when a transaction-mode pooler (PgBouncer, a managed pooler) sits in
    front: a connection is the server's only for one transaction, so nothing may outlive one
    (prepared statements, session ``SET``, ``LISTEN``)."""
    listen_url: str | None = field(default=None, repr=False)
    """Where to LISTEN for commits when the store's own URL cannot (a transaction pooler)."""
    replica_url: tuple[str, ...] = field(default=(), repr=False)
    """Streaming replicas that queries may read from (read-your-writes, see ``replicas``)."""
    replica_wait: float = 0.05
    """Seconds a query waits for a replica to replay what it needs before it reads the
    primary instead."""
    projecting: str = "elected"
    """``elected``: one process projects what commits alone, the others wait for it before
    a query; ``every``: each process projects every commit itself (``PROJECTING_MODES``)."""

    @property
    def replica_conninfos(self) -> tuple[str, ...]:
        """What each replica connection connects with."""
        return tuple(
            make_conninfo(libpq_url(url), connect_timeout=self.connect_timeout)
            for url in self.replica_url
        )

    @property
    def transaction_pooled(self) -> bool:
        """Whether every connection is a transaction-mode pooler's."""
        return self.pooler == "transaction"

    @property
    def listen_conninfo(self) -> str | None:
        """What a LISTEN connection connects with, or None where none can: through a
        transaction pooler without ``listen_url``, notifications give way to polling."""
        if self.listen_url is not None:
            return make_conninfo(libpq_url(self.listen_url), connect_timeout=self.connect_timeout)
        if self.transaction_pooled:
            return None
        return self.conninfo

    @property
    def endpoint(self) -> str:
        """Who connects where, as errors name it: ``user@host:port/database``, no password."""
        return (
            f"{self.user or '(default user)'}@{self.host or '(default host)'}:"
            f"{self.port or '5432'}/{self.dbname or '(default database)'}"
        )

    def with_overrides(self, **overrides: Any) -> PostgresSettings:
        """These settings with every override that is not None."""
        return dataclasses.replace(
            self, **{name: value for name, value in overrides.items() if value is not None}
        )


def _libpq_keywords() -> frozenset[str]:
    return frozenset(option.keyword.decode() for option in Conninfo.get_defaults())


def _split_query(url: str) -> tuple[str, dict[str, Any]]:
    """The URL without runledger's parameters, and those parameters read."""
    try:
        parts = urlsplit(url)
        fields = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as error:
        raise InvalidStoreUrlError(redact_url(url)) from error
    known = _libpq_keywords()
    ours: dict[str, Any] = {}
    kept: list[tuple[str, str]] = []
    for name, text in fields:
        if name in POOL_PARAMETERS:
            read, expected = POOL_PARAMETERS[name]
            try:
                value = read(text)
            except ValueError as error:
                invalid = InvalidStoreParameterError(
                    parameter=f"{name}={redact_url(text)!r}", problem=f"must be {expected}"
                )
                raise invalid from error
            if name in REPEATABLE_PARAMETERS:
                ours[name] = (*ours.get(name, ()), value)
            else:
                ours[name] = value
        elif name in known:
            kept.append((name, text))
        else:
            raise InvalidStoreParameterError(
                parameter=repr(name),
                problem="unknown; runledger reads "
                + ", ".join(POOL_PARAMETERS)
                + " and libpq its own "
                "connection parameters (sslmode, application_name, …)",
            )
    return urlunsplit(parts._replace(query=urlencode(kept))), ours


def read_postgres_url(url: str) -> PostgresSettings:
    """The settings a ``postgresql://`` URL names, or a ``WorkflowError`` saying what is wrong."""
    libpq_url, ours = _split_query(url)
    try:
        params = conninfo_to_dict(libpq_url)
    except psycopg.ProgrammingError as error:
        raise InvalidStoreUrlError(redact_url(url)) from error
    connect_timeout = ours.get("connect_timeout", PostgresSettings.connect_timeout)
    return PostgresSettings(
        conninfo=make_conninfo(libpq_url, connect_timeout=connect_timeout),
        host=str(params.get("host") or ""),
        port=str(params.get("port") or ""),
        dbname=str(params.get("dbname") or ""),
        user=str(params.get("user") or ""),
        password=str(params.get("password") or ""),
        **ours,
    )


def libpq_url(url: str) -> str:
    """The URL as libpq takes it: runledger's own parameters taken out."""
    return _split_query(url)[0]


__all__: Sequence[str] = [
    "POOL_PARAMETERS",
    "SQLITE_PREFIX",
    "PostgresSettings",
    "libpq_url",
    "read_postgres_url",
    "redact_url",
    "sqlite_path",
    "store_url",
]
