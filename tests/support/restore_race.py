"""One side of the restore race (tests/integration/test_restore_race.py): a process that
restores a bundle at the moment another one does."""

from __future__ import annotations

from typing import Any

from runledger.domain.errors import RestoreRefusedError
from runledger.infrastructure.store import open_store


def restore_process(url: str, bundle: str, barrier: Any, results: Any) -> None:
    """Restore ``bundle`` once both sides are at the barrier; put what happened."""
    with open_store(url) as store:
        barrier.wait()
        try:
            store.restore_runs(bundle)
        except RestoreRefusedError as refused:
            results.put(("refused", str(refused)))
        except Exception as error:  # the race must end in one of the two answers above
            results.put(("error", f"{type(error).__name__}: {error}"))
        else:
            results.put(("restored", ""))
