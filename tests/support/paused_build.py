"""A blue/green rebuild that stops after its first page, in a process of its own.

``python -m tests.support.paused_build URL NAME READY GO`` rebuilds projection NAME of the
store at URL; after the first committed page it creates the file READY, then waits until the
file GO exists before it goes on (and switches). A test kills it there (``kill -9``), or
races a second rebuild against it, or keeps writing commands meanwhile.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from runledger.infrastructure.runtime import open_runtime

WAIT_SECONDS = 120.0
"""Bounds the wait for GO, so a test that died never leaves this process behind for long."""


def main(url: str, name: str, ready: Path, go: Path) -> int:
    pages = 0

    def paused() -> None:
        nonlocal pages
        pages += 1
        if pages != 1:
            return
        ready.touch()
        deadline = time.monotonic() + WAIT_SECONDS
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    with open_runtime(url, embedded_projections=False) as runtime:
        [outcome] = runtime.builds.rebuild([name], on_page=paused)
    print(f"switched={outcome.switched} slot={outcome.slot} equal={outcome.equal}")
    return 0 if outcome.switched else 1


if __name__ == "__main__":
    url, name, ready, go = sys.argv[1:5]
    sys.exit(main(url, name, Path(ready), Path(go)))
