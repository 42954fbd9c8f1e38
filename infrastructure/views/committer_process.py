"""The committer process (``views.committer``): ``python -m`` runs this module, which nothing
imports, so the module it runs is not one the package imported already. It reads the store's
URL from its standard input and commits the pages that arrive on the socket whose descriptor
number it is given, until that closes."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import closing
from multiprocessing.connection import Connection
from typing import Any

from runledger.infrastructure.runtime import default_projections, open_backend
from runledger.infrastructure.storage.urls import redact_urls
from runledger.infrastructure.views.committer import decoded_pages
from runledger.infrastructure.views.store import PageCommits, PageRows, TrackingConflictError
from runledger.projections.base import Projection


def serve(connection: Connection, url: str) -> None:
    """Commit the pages that arrive on ``connection`` until it closes."""
    try:
        storage, views = open_backend(url, create=False)
        projections = {projection.name: projection for projection in default_projections()}
    except Exception as error:
        # The host logs it: no password.
        connection.send(("failed", redact_urls(f"{type(error).__name__}: {error}")))
        return
    # Nothing made from here on lives long: a collection would only walk the modules.
    gc.freeze()
    try:
        with views.build_commits() as build:
            if build is None:
                connection.send(("failed", "the store commits no build pages"))
                return
            connection.send(("ready",))
            for pages in _pages(connection):
                connection.send(_committed(build, pages, projections, plain=views.plain))
    finally:
        views.close()
        storage.close()


def _pages(connection: Connection) -> Iterator[list[PageRows]]:
    while True:
        try:
            message = connection.recv_bytes()
        except (EOFError, OSError):
            return
        yield decoded_pages(message)


def _committed(
    build: PageCommits, pages: list[PageRows], projections: dict[str, Projection], *, plain: bool
) -> tuple[Any, ...]:
    try:
        build.send([page.commit(projections[page.name], plain=plain) for page in pages])
        build.settle()
    except TrackingConflictError as conflict:
        return ("conflict", conflict.name, conflict.expected, conflict.actual)
    except Exception as error:
        # The host logs it.
        return ("error", redact_urls(f"{type(error).__name__}: {error}"))
    return ("ok",)


if __name__ == "__main__":
    with closing(Connection(int(sys.argv[1]))) as pipe:
        serve(pipe, sys.stdin.read())
    # Skips the interpreter's teardown of every module: the store is closed, nothing is left.
    os._exit(0)
