"""The bench's peak RSS is the measured process's own, not the bench's that started it."""

from __future__ import annotations

import subprocess
import sys

from runledger.infrastructure.cli.bench.memory import peak_rss_mb

PROBE = "from runledger.infrastructure.cli.bench.memory import peak_rss_mb; print(peak_rss_mb())"


def test_a_child_started_by_a_large_parent_reports_its_own_peak() -> None:
    # Written, so the pages are resident in this process when it forks the child.
    ballast = b"\x01" * (300 * 1024 * 1024)
    assert peak_rss_mb() >= 300
    child = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    )
    del ballast
    # ru_maxrss would say >= 300 here: exec keeps the forked copy's high-water mark.
    assert 5 < float(child.stdout) < 150
