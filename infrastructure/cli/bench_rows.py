"""The bench rows measured outside ``bench.py``: the one list ``runledger bench`` adds.

Each entry is ``(id, measure)``; ``measure(bench)`` returns the row's ``BenchResult``, or None
when the row does not apply to ``bench.backend`` (see the ``bench`` module docstring). A row
module imports ``Bench`` and ``BenchResult`` from ``bench``; this module imports the row
modules, so ``bench`` never imports them back. Add one line per row, e.g.
``("P3", bench_projections.rebuild_rate),`` after ``from runledger.infrastructure.cli import
bench_projections``.
"""

from __future__ import annotations

from typing import Final

from runledger.infrastructure.cli.bench import RowMeasure

EXTRA_ROWS: Final[list[tuple[str, RowMeasure]]] = []
