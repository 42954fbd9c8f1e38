"""A build's page commits in a process of their own, beside the build's reading and applying.

Where a one-process rebuild's time went (py-spy, P3: 50k events on SQLite): decoding the
events 30 %, applying them 14 %, encoding the changed rows 19 %, committing them 18 %. All of
it on one core of two. The committer takes each page's rows as the projections made them,
encodes and commits them while the build decodes and applies the next page; the rows go over
a socket in ``marshal``'s form (``encoded_pages``), at a fifth of their encoding's cost. P3
went from 30.5k to 41.5k events/s on SQLite; on PostgreSQL, whose server backend shares the
second core with the committer, 5-8 % faster.

The committer is a plain interpreter started with ``-m`` (not multiprocessing's spawn, which
imports the host's ``__main__`` again: a host script without the ``if __name__`` guard would
run twice), and it is ready once it has imported runledger and opened the store, about 0.6 s
later. Until then every page commits in the build's own process as before, so a short
rebuild never waits for it. A runtime keeps its committer for its later rebuilds and ends it
when it closes. It ends with the process that started it too: the pipe's end-of-file ends
it, after the page it has (a page committed or lost is alike to a build's slot: the next
build resumes from what the slot holds). A signal from the kernel at the parent's death
(``PR_SET_PDEATHSIG``) would follow the thread that started it, not the process.

Pages are committed in order, one under way at a time, as ``PageCommits`` says: the build's
cache reads an evicted row of the page under way from that page (``ProjectionRunner.
committing``), and every row before it from the store. A page that fails in the committer
raises in the build at the next ``settle``: a moved projection as ``TrackingConflictError``,
any other failure as ``CommitterError`` with what the committer raised. A committer that
dies is not used again; the build resumes from its slots and commits its own pages
(``views.rebuild.Builds``).
"""

from __future__ import annotations

import logging
import marshal
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import astuple
from multiprocessing.connection import Connection
from typing import Final

from runledger.infrastructure.views.store import (
    PageCommit,
    PageCommits,
    PageRows,
    TrackingConflictError,
    TrackingState,
)

logger = logging.getLogger(__name__)

CLOSE_SECONDS: Final = 10.0
"""How long a closing committer may take to finish and exit before it is killed."""


class CommitterError(RuntimeError):
    """A page failed in the committer process with something other than a moved projection."""


class Committer:
    """One committer process and this process's end of its pipe."""

    def __init__(self, url: str) -> None:
        ours, theirs = socket.socketpair()
        try:
            # This interpreter, this package's module and a descriptor number: no input.
            self._process = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", f"{__package__}.committer_process", str(theirs.fileno())],
                stdin=subprocess.PIPE,
                pass_fds=(theirs.fileno(),),
                close_fds=True,
                # Where this process imports runledger from, also when it set that itself.
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        # The URL may hold a password: a pipe, not the command line that ``ps`` shows.
        with self._process.stdin as stdin:  # type: ignore[union-attr]
            stdin.write(url.encode())
        self._connection = Connection(ours.detach())
        self._ready = False
        self._under_way = False
        self.broken = False

    @property
    def pid(self) -> int:
        """The committer's process id."""
        return self._process.pid

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether the committer has opened the store and takes pages, waiting up to
        ``timeout`` seconds for it (a build never waits)."""
        if self._ready or self.broken:
            return self._ready
        try:
            if not self._connection.poll(timeout):
                return False
            reply = self._connection.recv()
        except (EOFError, OSError):
            reply = ("failed", "it ended before it was ready")
        if reply[0] == "ready":
            self._ready = True
        else:
            self.broken = True
            logger.warning("the build's committer did not start: %s", reply[1])
        return self._ready

    def send(self, pages: Sequence[PageRows]) -> None:
        if self._under_way:
            msg = "the page under way has not settled"
            raise RuntimeError(msg)
        try:
            self._connection.send_bytes(encoded_pages(pages))
        except OSError as error:
            self.broken = True
            raise CommitterError(f"the committer is gone: {error}") from error
        self._under_way = True

    def settle(self) -> None:
        if not self._under_way:
            return
        self._under_way = False
        try:
            reply = self._connection.recv()
        except (EOFError, OSError) as error:
            self.broken = True
            raise CommitterError("the committer ended with a page under way") from error
        if reply[0] == "conflict":
            raise TrackingConflictError(*reply[1:])
        if reply[0] == "error":
            raise CommitterError(reply[1])

    def close(self) -> None:
        """Let the committer finish and exit (killed after ``CLOSE_SECONDS``)."""
        with suppress(OSError):
            self._connection.close()
        try:
            self._process.wait(timeout=CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


_MARSHALLED: Final = b"m"
_PICKLED: Final = b"p"


def encoded_pages(pages: Sequence[PageRows]) -> bytes:
    """Pages as they go to the committer: in ``marshal``'s form, which the rows' plain types
    take at 40 % of pickle's cost (62 against 148 ms for the 50k-event bench history, a
    tenth of the build's own processor time); pickled where a row holds another type."""
    plain = [
        (page.name, page.expected_position, page.new_position, page.rows, astuple(page.slot))
        for page in pages
    ]
    try:
        return _MARSHALLED + marshal.dumps(plain)
    except ValueError:
        return _PICKLED + pickle.dumps(pages, protocol=pickle.HIGHEST_PROTOCOL)


def decoded_pages(message: bytes) -> list[PageRows]:
    """The pages ``encoded_pages`` sent; only ever from the process that started this one,
    over a socket pair only the two hold."""
    if message[:1] == _PICKLED:
        pages: list[PageRows] = pickle.loads(message[1:])  # noqa: S301
        return pages
    return [
        PageRows(name, expected, new, rows, TrackingState(*slot))
        for name, expected, new, rows, slot in marshal.loads(message[1:])  # noqa: S302
    ]


class OffloadedCommits:
    """A build's ``BuildCommits``: pages go to the committer once it is ready, and commit
    in this process (``local``, the view store's own) until then."""

    def __init__(self, local: PageCommits, committer: Committer | None) -> None:
        self._local = local
        self._committer = committer

    def takes_rows(self) -> bool:
        return self._committer is not None and self._committer.ready()

    def send(self, pages: Sequence[PageCommit]) -> None:
        self._local.send(pages)

    def send_rows(self, pages: Sequence[PageRows]) -> None:
        if self._committer is None:
            msg = "no committer takes rows"
            raise RuntimeError(msg)
        self._committer.send(pages)

    def settle(self) -> None:
        # At most one of them has a page under way; the other returns at once.
        self._local.settle()
        if self._committer is not None:
            self._committer.settle()
