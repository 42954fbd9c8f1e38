"""Upstream's viewer page arithmetic (§7): which 256-item page a viewer shows. runledger's
viewer deltas carry the tail of each list; a viewer that pages computes this itself, so only
the tests that pin the page contract use it."""

from __future__ import annotations

from runledger.domain.errors import InvalidViewerCursorError, ViewerPageTotalError
from runledger.domain.values import is_count
from runledger.projections.viewer_deltas import VIEWER_PAGE_SIZE


def workflow_page_start(total: int, cursor: int | None = None) -> int:
    """Start of the 256-item page a viewer shows: the last page, or one around ``cursor``."""
    if not is_count(total, None):
        raise ViewerPageTotalError()
    if cursor is not None and not is_count(cursor, None):
        raise InvalidViewerCursorError()
    if total <= VIEWER_PAGE_SIZE:
        return 0
    last_start = total - VIEWER_PAGE_SIZE
    if cursor is None:
        return last_start
    # Half a page before the cursor, so the viewer sees what led up to it.
    return min(max(0, cursor - VIEWER_PAGE_SIZE // 2), last_start)
