"""A build's page commits on PostgreSQL: rows copied in, the rest sent without waiting.

Where a one-process rebuild's time went (py-spy and timers, 50k events, 59k rows written):
psycopg building and sending each row's statement took 0.49 s of the rebuild's 1.85 s of
client time, while the server kept up. Here a page's rows go to a staging table with
``COPY`` (its rows formatted in C: 0.09 s of client time for the same rows), and the
statements that move them into the slot's tables, move the tracking and commit go out in
pipeline mode without waiting; the build projects the next page while the server works,
and that page first waits for this one's commit (``settle``). One page is under way at a
time, and pages commit in order.

No thread: a commit thread waited for the GIL at every row it sent (measured slower, see
the README's P3 notes). A page whose statements send too much text to pipeline
(``PIPELINE_MAX_BYTES``; copied rows do not count) sends them one at a time, after the page
before it settled.

A failed page aborts its transaction: ``settle`` raises the failure (a moved projection as
``TrackingConflictError``, as a plain commit does). A build stops there, and the next one
resumes from what its slot holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg.pq import TransactionStatus

from runledger.infrastructure.databases import PIPELINE_MAX_BYTES
from runledger.infrastructure.views.store import PageCommit


@dataclass(frozen=True)
class StagedPage:
    """What writes a staged page's rest (``PostgresViewStore.stage_page``)."""

    write: Callable[[psycopg.Cursor[Any]], None]
    text_bytes: int
    """About how many bytes of text ``write`` sends: only the rows not copied in, so a
    page's rows are counted only if they go out as statements (counting them all was 2 % of
    a rebuild, P3 on PostgreSQL)."""


class PageWriter(Protocol):
    """What of ``PostgresViewStore`` the deferred commits use."""

    def get_connection(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    def stage_page(self, cursor: psycopg.Cursor[Any], pages: Sequence[PageCommit]) -> StagedPage:
        """Copy the pages' rows into staging tables; what writes the rest."""

    def commit_error(self, error: Exception, pages: Sequence[PageCommit]) -> Exception: ...


class DeferredPageCommits:
    """Page commits of one build on one pooled connection."""

    def __init__(self, views: PageWriter, connection: psycopg.Connection[Any]) -> None:
        self.views = views
        self.connection = connection
        self._pipeline = ExitStack()
        self._under_way: Sequence[PageCommit] = ()

    def send(self, pages: Sequence[PageCommit]) -> None:
        if self._under_way:
            msg = "the page under way has not settled"
            raise RuntimeError(msg)
        self._under_way = pages
        try:
            with self.connection.cursor() as cursor:
                cursor.execute(b"BEGIN")
                # As a plain page commit: a page lost in a crash is projected again.
                cursor.execute(b"SET LOCAL synchronous_commit = off")
                staged = self.views.stage_page(cursor, pages)
                if staged.text_bytes <= PIPELINE_MAX_BYTES:
                    self._pipeline.enter_context(self.connection.pipeline())
                staged.write(cursor)
                cursor.execute(b"COMMIT")
            # libpq keeps up to 64 KiB of a pipeline unsent until asked: send the page's
            # tail now, so the server can finish the page while the build works on the next.
            self.connection.pgconn.flush()
        except psycopg.Error as error:
            # The page's own results can arrive while it is still being sent.
            self._under_way = ()
            self._recover()
            raise self.views.commit_error(error, pages) from error

    def settle(self) -> None:
        pages, self._under_way = self._under_way, ()
        if not pages:
            return
        try:
            # Leaving the pipeline syncs it: every result of the page is in.
            self._pipeline.close()
            if self.connection.info.transaction_status != TransactionStatus.IDLE:
                msg = "a page's transaction did not end"
                raise psycopg.InternalError(msg)
        except psycopg.Error as error:
            self._recover()
            raise self.views.commit_error(error, pages) from error

    def _recover(self) -> None:
        """After a failed page: out of its transaction, so the pool gets the connection back
        as it lent it."""
        with suppress(psycopg.Error):
            self._pipeline.close()
        if self.connection.info.transaction_status != TransactionStatus.IDLE:
            self.connection.execute(b"ROLLBACK")


@contextmanager
def deferred_commits(views: PageWriter) -> Iterator[DeferredPageCommits]:
    """Deferred page commits on a connection of the views' pool for the block; the last page
    has committed (or raised) when the block ends without an error."""
    with views.get_connection() as connection:
        commits = DeferredPageCommits(views, connection)
        try:
            yield commits
        except BaseException:
            # Already failing: the page under way may fail too; this error says more.
            with suppress(Exception):
                commits.settle()
            raise
        commits.settle()
