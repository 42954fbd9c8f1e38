"""What a projection runner's cached rows weigh, for a cache bounded in bytes as well as rows.

A bound in rows alone lets memory follow the rows' size, and read models differ by 30x: a
viewer-delta run row holds the run's follow-up window (about 4 kB of JSON, 13 kB decoded),
a follow-up queue row about 450 bytes decoded. A build's 2,000 rows grew from 100k to 1M
events of the bench history as more runs reached the cache (peak RSS 102 -> 122 MB, the
goal is within 10 %), and a live runner's 100,000 could have held 1.3 GB of viewer-delta
rows in a host that touched as many runs.

Each table's weight is the length of a row's JSON, sampled (the first row, then one in
``SAMPLE_EVERY``) and averaged, so keeping a row costs a counter, not an encoding. JSON
length is a proxy: a decoded row takes about three times as much memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import orjson

SAMPLE_EVERY: Final = 64
"""Rows kept between two samples of a table's row size."""

UNMEASURABLE_BYTES: Final = 1024
"""The weight of a row orjson cannot encode (a projection's rows are JSON values)."""


def json_size(row: Mapping[str, Any]) -> int:
    """The length of a row's JSON, ``UNMEASURABLE_BYTES`` where it has none."""
    try:
        return len(orjson.dumps(row, default=repr, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):
        return UNMEASURABLE_BYTES


class RowSizes:
    """Each table's sampled row weight, and how many rows to evict for a bound in bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        """The most bytes of JSON the cache holds, by the tables' weights."""
        self.weights: dict[str, float] = {}
        self.heaviest = 0.0
        """The largest weight: below ``limit / heaviest`` rows no table needs weighing."""
        self._until_sample: dict[str, int] = {}

    def kept(self, table_name: str, row: Mapping[str, Any]) -> None:
        """Count a row the cache keeps; every ``SAMPLE_EVERY``-th of a table is weighed."""
        left = self._until_sample.get(table_name, 0)
        if left:
            self._until_sample[table_name] = left - 1
            return
        self._until_sample[table_name] = SAMPLE_EVERY - 1
        size = json_size(row)
        known = self.weights.get(table_name)
        # A running mean that follows a table whose rows grow (a run's window fills up).
        weight = size if known is None else known + (size - known) / 8
        self.weights[table_name] = weight
        self.heaviest = max(self.heaviest, weight)

    def evictions(self, counts: Mapping[str, int]) -> dict[str, int]:
        """How many rows each table gives up (oldest first) so the cache of ``counts`` rows
        per table is within ``limit``: the heaviest tables in bytes come down first."""
        weights = self.weights
        sizes = {name: int(count * weights.get(name, 0.0)) for name, count in counts.items()}
        over = sum(sizes.values()) - self.limit
        if over <= 0:
            return {}
        return {
            name: min(counts[name], math.ceil(amount / weights[name]))
            for name, amount in levelled_evictions(sizes, over).items()
            if amount > 0
        }


def levelled_evictions(sizes: Mapping[str, int], excess: int) -> dict[str, int]:
    """How much each table gives up (in rows, or bytes) so that ``excess`` goes, taking one
    at a time from whichever table is then the largest: the largest tables come down to one
    level (the first ``spare`` of them, largest first, keep one more)."""
    ranked = sorted(sizes.items(), key=lambda item: -item[1])
    above = 0  # what is over the level of the k largest tables
    count = len(ranked)
    for k in range(1, len(ranked) + 1):
        next_size = ranked[k][1] if k < len(ranked) else 0
        if above + k * (ranked[k - 1][1] - next_size) >= excess:
            count = k
            break
        above += k * (ranked[k - 1][1] - next_size)
    top = ranked[:count]
    level, spare = divmod(sum(size for _, size in top) - excess, count)
    return {
        name: size - level - (1 if index < spare else 0) for index, (name, size) in enumerate(top)
    }
