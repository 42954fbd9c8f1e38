"""What the commit path counts: read by the bench and by operators through
``StoreRuntime.stats``, never reached into."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CommitStats:
    """Counters of one store's commits since it opened (increments under the GIL: a reading
    may be a moment old, never torn)."""

    conflicts: int = 0
    """Version conflicts that made a command run again (a measure of contention)."""
    batches: int = 0
    """Transactions the group commit wrote (groups, and requests written alone)."""
    requests: int = 0
    """Inserts that went through the group commit."""
    read_models_with_events: int = 0
    """Saves whose read models committed in the events' own transaction."""
