"""The peak resident memory of this process, as the rows that report one (V3, R1) read it."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mb(pid: int | None = None) -> float:
    """This process's (or process ``pid``'s, on Linux) peak RSS since it was started, in MB.

    ``getrusage(RUSAGE_SELF).ru_maxrss`` is not that on Linux: exec keeps the high-water mark
    of the image it replaced, which for a child the bench starts is the forked copy of the
    bench itself (570 MB late in a run, so V3 and R1 reported the parent's size).
    ``VmHWM`` is the high-water mark of this image alone.
    """
    try:
        status = Path(f"/proc/{pid or 'self'}/status").read_text(encoding="ascii")
    except OSError:
        if pid is not None:
            return 0.0
        # Not Linux: ru_maxrss is bytes on macOS, and exec does not carry it over there.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 * 1024)
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
