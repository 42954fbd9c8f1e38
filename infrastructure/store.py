"""The composition root: ``open_store(url)`` builds a ``WorkflowStore`` on one backend."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import TracebackType
from typing import Final

from domain.application import Clock, WorkflowRuns, utc_now
from domain.errors import InvalidStoreUrlError
from domain.ports import EventStorage

DEFAULT_URL: Final = "sqlite:///runledger.db"
URL_VARIABLE: Final = "RUNLEDGER_URL"


class WorkflowStore(WorkflowRuns):
    """The public entry point: every command, consistent read and query of runledger."""

    def __init__(self, storage: EventStorage, *, url: str, clock: Clock = utc_now) -> None:
        self.url = url
        super().__init__(storage, clock=clock)

    @property
    def backend(self) -> str:
        return self.url.split(":", 1)[0]

    def close(self) -> None:
        super().close()
        self.storage.close()

    def __enter__(self) -> WorkflowStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()


def resolve_url(url: str | None, env: Mapping[str, str] | None = None) -> str:
    """The store URL: the given one, else ``RUNLEDGER_URL``, else the embedded default."""
    if url:
        return url
    environment = os.environ if env is None else env
    return environment.get(URL_VARIABLE) or DEFAULT_URL


def open_storage(url: str) -> EventStorage:
    """The event storage a URL names; tables are created on first use."""
    if url.startswith("sqlite:///"):
        from infrastructure.storage_sqlite import SQLiteStorage

        return SQLiteStorage(url.removeprefix("sqlite:///"))
    if url.startswith(("postgresql://", "postgres://")):
        from infrastructure.storage_postgres import PostgresStorage

        return PostgresStorage(url)
    if url == "memory://":
        from infrastructure.storage_memory import MemoryStorage

        return MemoryStorage()
    raise InvalidStoreUrlError(url)


def open_store(
    url: str | None = None,
    *,
    clock: Clock = utc_now,
    env: Mapping[str, str] | None = None,
) -> WorkflowStore:
    """Open the store at ``url`` (``sqlite:///file``, ``postgresql://…`` or ``memory://``)."""
    resolved = resolve_url(url, env)
    return WorkflowStore(open_storage(resolved), url=resolved, clock=clock)
