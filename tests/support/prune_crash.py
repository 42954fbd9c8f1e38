"""A prune that SIGKILLs its own process at one step (``python -m tests.support.prune_crash
URL ARCHIVE STEP``), for the crash tests: nothing in runledger knows of it; the steps are
module functions a prune calls, replaced here before it starts.

Steps, in the order a tree goes through them:

- ``bundle-written``: the bundle is in place, not yet fsynced;
- ``not-verified``: fsynced, not yet read back through ``verify_bundle``;
- ``verified``: verified, its removal not yet begun;
- ``mid-transaction``: the tombstone, guard rows and deletes are in the removal's transaction,
  the read models' rows are written in it too, and it is not committed;
- ``committed``: the removal committed, this process's caches not yet told.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime
from typing import Any, NoReturn

from runledger.infrastructure import open_store
from runledger.infrastructure.audit import prune, retention

CUTOFF = datetime(2099, 1, 1, tzinfo=UTC)
STEPS = ("bundle-written", "not-verified", "verified", "mid-transaction", "committed")


def die(*_: Any) -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _killed_mid_transaction(real: Any) -> Any:
    def views_write(*args: Any) -> Any:
        write = real(*args)

        def written_then_killed(cursor: Any, head: int, tombstone: int) -> bool:
            write(cursor, head, tombstone)
            die()

        return written_then_killed

    return views_write


def arm(step: str) -> None:
    """Replace the function the prune calls at ``step`` with one that kills the process."""
    module, name = {
        "bundle-written": (retention, "_fsync"),
        "not-verified": (retention, "verify_bundle"),
        "verified": (prune, "tree_removal"),
        "mid-transaction": (prune, "views_write"),
        "committed": (prune, "forget_cached"),
    }[step]
    replacement = _killed_mid_transaction(prune.views_write) if name == "views_write" else die
    setattr(module, name, replacement)


def main(url: str, archive: str, step: str) -> None:
    arm(step)
    with open_store(url) as store:
        store.prune_runs(settled_before=CUTOFF, archive=archive)
    raise SystemExit("the prune ended without reaching its step")


if __name__ == "__main__":
    main(*sys.argv[1:4])
