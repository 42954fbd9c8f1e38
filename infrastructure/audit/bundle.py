"""``export_run``: write a run's self-contained audit bundle (format: ``bundle_format``).

The events are read once, chained per aggregate, and re-projected from their bundle form
(the canonical text parsed back), so the expected digests are exactly what an offline
checker re-projecting the same lines gets. The file is written beside its final name and
moved into place, so a failed export never leaves half a bundle under that name.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runledger.domain.audit_chain import chain_link, chain_start
from runledger.domain.canonical import canonical_json
from runledger.domain.errors import BundleWriteError, InvalidProgressError, WorkflowError
from runledger.domain.ports import LogEntry
from runledger.domain.serialisation import stored_payload
from runledger.infrastructure.audit.bundle_format import (
    CHAIN,
    FORMAT,
    FORMAT_VERSION,
    HEADS,
    bundle_event_text,
    catalogue,
    header_digest,
    line_text,
    store_version,
)
from runledger.infrastructure.audit.lineage import audited_run, lineage_runs
from runledger.infrastructure.audit.reprojection import reproject
from runledger.infrastructure.audit.stored_events import aggregate_text, run_notifications
from runledger.infrastructure.audit.trail import check_flag
from runledger.infrastructure.collector import collector_paused
from runledger.infrastructure.runtime import StoreRuntime, default_projections

Progress = Callable[[int], None]


def bundle_path(path: object, refused: Callable[[str, str], WorkflowError]) -> Path:
    """A bundle file's path from text or a path-like; ``refused(path as shown, reason)`` is
    the error for anything else (``BundleWriteError`` for an export, ``RestoreRefusedError``
    for a restore: each says what could not be done).

    An empty path is refused here, as ``Path`` would make it the current folder; so is a NUL
    or a lone surrogate, which no file name holds (the write would fail with a
    ``UnicodeEncodeError``), shown escaped rather than written to a terminal."""
    if not isinstance(path, (str, os.PathLike)):
        raise refused(str(path), "the path must be text or a path")
    try:
        text = os.fsdecode(path)
    except (TypeError, ValueError) as error:
        raise refused(str(path), str(error)) from None
    if not text:
        raise refused('""', "the path is empty")
    try:
        named = "\0" not in text and bool(os.fsencode(text))
    except UnicodeEncodeError:
        named = False
    if not named:
        shown = text.replace("\0", "\\0").encode("utf-8", "backslashreplace").decode()
        raise refused(shown, "the path must be a file name")
    return Path(text)


def export_bundle(
    runtime: StoreRuntime,
    run_id: str,
    path: object,
    *,
    lineage: bool = True,
    progress: Progress | None = None,
) -> int:
    """Write the bundle of the run (and, with ``lineage``, its ancestors and descendants) to
    ``path``; ``progress`` hears of events as they are chained, then as they are re-projected
    (twice the events in all). Returns the
    number of events written."""
    with_lineage = check_flag("lineage", lineage)
    if progress is not None and not callable(progress):
        raise InvalidProgressError()
    target = bundle_path(path, BundleWriteError)
    with collector_paused():
        return _export(runtime, run_id, target, with_lineage, progress)


def _export(
    runtime: StoreRuntime,
    run_id: str,
    target: Path,
    with_lineage: bool,
    progress: Progress | None,
) -> int:
    run = audited_run(runtime, run_id)
    runs = lineage_runs(runtime, run) if with_lineage else [run.run_id]
    # An aggregate's id is parsed and written out once, however many events it has.
    id_text = functools.cache(aggregate_text)
    stored: list[dict[str, Any]] = [
        {
            "position": notification.id,
            "wire_name": notification.topic,
            "aggregate_id": id_text(notification.originator_id),
            "version": notification.originator_version,
            "state": stored_payload(notification, notification.id),
        }
        for notification in run_notifications(runtime.storage, runs)
    ]
    aggregates: dict[str, dict[str, int]] = {}
    for event in stored:
        span = aggregates.setdefault(event["aggregate_id"], {"first": event["version"]})
        span["last"] = event["version"]
    header: dict[str, Any] = {
        "kind": "header",
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "run_id": run.run_id,
        "lineage": with_lineage,
        "runs": runs,
        "store_version": store_version(),
        "catalogue": catalogue(),
        "chain": CHAIN,
        "events": len(stored),
        "aggregates": aggregates,
    }
    # The chains start from the header, so they are written once it is complete (but heads).
    digest = header_digest(header)
    heads: dict[str, str] = {}
    lines: list[str] = []
    entries: list[LogEntry] = []
    for event in stored:
        aggregate_id = event["aggregate_id"]
        text, state = bundle_event_text(event)
        previous = heads.get(aggregate_id)
        first = previous is None
        head = heads[aggregate_id] = chain_link(
            chain_start(aggregate_id, digest) if previous is None else previous, text
        )
        seed = f'"header":"{digest}",' if first else ""
        lines.append(line_text(f'{{"event":{text.decode()},"hash":"{head}",{seed}"kind":"event"}}'))
        # The payload as the bundle holds it (its canonical text), so the digests below come
        # from what an offline checker re-projects: the same values, keys in the same order.
        entries.append(
            LogEntry(event["position"], event["wire_name"], aggregate_id, event["version"], state)
        )
        if progress is not None and len(entries) % 1000 == 0:
            progress(1000)
    if progress is not None and len(entries) % 1000:
        progress(len(entries) % 1000)
    fresh = reproject(entries, default_projections(), progress=progress)
    header[HEADS] = heads
    digests = {"kind": "digests", "read_models": fresh.digests()}
    _write(target, [line_text(canonical_json(header)), *lines, line_text(canonical_json(digests))])
    return len(entries)


def _write(target: Path, lines: list[str]) -> None:
    folder = target.parent
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    except OSError as error:
        raise BundleWriteError(path=str(target), reason=error.strerror or str(error)) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as file:
            for line in lines:
                file.write(line)
                file.write("\n")
        os.replace(temporary, target)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise BundleWriteError(path=str(target), reason=error.strerror or str(error)) from None
