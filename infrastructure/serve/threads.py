"""The server's threads for the store's blocking calls: a fixed few, alive as long as it is.

A SQLite store keeps one connection per thread that used it. Starlette's thread pool grows to
40 threads under load and lets idle ones end, and each new thread would open a new connection
while the ended thread's stays in the store (three descriptors each): clients coming and
going would make the server's descriptors grow without bound. These threads never end before
the server does, so the store holds at most ``SERVE_THREADS`` reading connections for the
server's calls; a call beyond them waits its turn, which also bounds how many slow reads run
at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

SERVE_THREADS: Final = 8

P = ParamSpec("P")
R = TypeVar("R")


class StoreThreads:
    """Runs blocking calls on ``SERVE_THREADS`` threads, awaited from the event loop."""

    def __init__(self, count: int = SERVE_THREADS) -> None:
        self._executor = ThreadPoolExecutor(max_workers=count, thread_name_prefix="runledger-serve")

    async def run(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``function(*args, **kwargs)`` on one of the threads."""
        loop = asyncio.get_running_loop()
        # In the caller's context: the request's span (traceparent) is the store call's parent.
        context = contextvars.copy_context()
        return await loop.run_in_executor(
            self._executor, functools.partial(context.run, function, *args, **kwargs)
        )

    def close(self) -> None:
        """End the threads once the calls under way are done."""
        self._executor.shutdown(wait=True)


__all__: Sequence[str] = ["SERVE_THREADS", "StoreThreads"]
