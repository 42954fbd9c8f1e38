"""``verify_bundle``: check an export bundle with no store and no database.

In order: the header (format, run, catalogue against this runledger's), the event lines
(each aggregate's hash chain, versions and log order), then the read models re-projected
from the bundle's events against the digests it carries. The first problem found is the
verdict, named as one of: ``header``, ``altered`` (an event's content or hash does not chain),
``removed`` (a version the header promises is missing), ``inserted`` (an event the header
does not account for, or a second copy), ``reordered`` (events out of log or version order)
and ``digest`` (the re-projection does not give the digests the bundle carries).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from runledger.domain.audit_chain import chain_link, chain_start
from runledger.domain.canonical import canonical_json
from runledger.domain.errors import BundleReadError
from runledger.domain.records import BundleProblem, BundleVerdict
from runledger.infrastructure.audit.bundle_format import (
    FORMAT,
    FORMAT_VERSION,
    catalogue,
    entry_of,
    is_event_object,
)
from runledger.infrastructure.audit.reprojection import reproject
from runledger.infrastructure.runtime import default_projections


class _ProblemFoundError(Exception):
    """The first problem of the bundle: becomes the verdict."""

    def __init__(self, problem: BundleProblem, detail: str, **where: Any) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.where = where


@dataclass
class _Line:
    number: int
    event: dict[str, Any]
    hash: Any
    key: tuple[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.event["aggregate_id"], self.event["version"])

    def where(self) -> dict[str, Any]:
        return {
            "line": self.number,
            "aggregate_id": self.event["aggregate_id"],
            "version": self.event["version"],
            "position": self.event["position"],
        }


def verify_bundle(path: str | os.PathLike[str]) -> BundleVerdict:
    """Check the bundle at ``path``; the verdict is ok or names its first problem."""
    lines = list(_read(path))
    run_id: str | None = None
    events = 0
    try:
        header = _header(lines)
        run_id = header["run_id"]
        parsed, digests = _body(lines)
        events = len(parsed)
        _check_chains(header, parsed)
        _check_digests(parsed, digests)
    except _ProblemFoundError as found:
        return BundleVerdict(
            ok=False,
            run_id=run_id,
            events=events,
            problem=found.problem,
            detail=found.detail,
            **found.where,
        )
    return BundleVerdict(ok=True, run_id=run_id, events=events, problem=None, detail=None)


def _read(path: object) -> Iterator[tuple[int, str]]:
    if not isinstance(path, (str, os.PathLike)):
        raise BundleReadError(path, "the path must be text or a path")
    try:
        text = Path(os.fsdecode(path)).read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise BundleReadError(str(path), reason) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, line


def _json(line: str) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def _header(lines: list[tuple[int, str]]) -> dict[str, Any]:
    if not lines:
        raise _ProblemFoundError("header", "the bundle is empty", line=1)
    header = _json(lines[0][1])
    if not isinstance(header, dict) or header.get("kind") != "header":
        raise _ProblemFoundError(
            "header", "the first line is not a bundle header", line=lines[0][0]
        )
    if header.get("format") != FORMAT or header.get("format_version") != FORMAT_VERSION:
        raise _ProblemFoundError(
            "header",
            f"not a {FORMAT} of version {FORMAT_VERSION}",
            line=lines[0][0],
        )
    runs = header.get("runs")
    if (
        not isinstance(header.get("run_id"), str)
        or not isinstance(runs, list)
        or header["run_id"] not in runs
    ):
        raise _ProblemFoundError(
            "header", "the header's run is not among its runs", line=lines[0][0]
        )
    _check_catalogue(header.get("catalogue"), lines[0][0])
    aggregates = header.get("aggregates")
    if not isinstance(aggregates, dict) or not all(
        isinstance(chain, dict)
        and {"first", "last", "head"} <= chain.keys()
        and all(isinstance(chain[name], int) for name in ("first", "last"))
        for chain in aggregates.values()
    ):
        raise _ProblemFoundError(
            "header", "the header's aggregate chains are malformed", line=lines[0][0]
        )
    if not isinstance(header.get("events"), int):
        raise _ProblemFoundError("header", "the header does not count its events", line=lines[0][0])
    return header


def _check_catalogue(theirs: object, line: int) -> None:
    """Every wire name the bundle declares must read back with this runledger: known here,
    at most this class version, and with this version's fields when it is this version."""
    ours = catalogue()
    if not isinstance(theirs, dict):
        raise _ProblemFoundError("header", "the header has no event catalogue", line=line)
    for wire_name, declared in sorted(theirs.items()):
        mine = ours.get(wire_name)
        if mine is None:
            raise _ProblemFoundError(
                "header", f"wire name {wire_name!r} is not in the catalogue", line=line
            )
        their_version = declared.get("class_version") if isinstance(declared, dict) else None
        if not isinstance(their_version, int) or not 1 <= their_version <= mine["class_version"]:
            raise _ProblemFoundError(
                "header",
                f"{wire_name} is declared at class version {their_version!r}, "
                f"this runledger reads 1 to {mine['class_version']}",
                line=line,
            )
        if their_version == mine["class_version"] and declared.get("fields") != mine["fields"]:
            raise _ProblemFoundError(
                "header",
                f"{wire_name} class version {their_version} is declared with other fields",
                line=line,
            )


def _body(lines: list[tuple[int, str]]) -> tuple[list[_Line], dict[str, Any]]:
    if len(lines) < 2:
        raise _ProblemFoundError("digest", "the read-model digests are missing", line=None)
    number, last = lines[-1]
    digests = _json(last)
    if not isinstance(digests, dict) or digests.get("kind") != "digests":
        raise _ProblemFoundError(
            "digest", "the last line is not the read-model digests", line=number
        )
    parsed: list[_Line] = []
    for number, text in lines[1:-1]:
        line = _json(text)
        if not isinstance(line, dict) or line.get("kind") != "event":
            raise _ProblemFoundError(
                "inserted", "a line that is not an event of the bundle", line=number
            )
        if not is_event_object(line.get("event")):
            raise _ProblemFoundError(
                "altered", "the event's fields are not a bundle event's", line=number
            )
        parsed.append(_Line(number, line["event"], line.get("hash")))
    return parsed, digests


def _check_chains(header: dict[str, Any], lines: list[_Line]) -> None:
    declared: dict[str, dict[str, Any]] = header["aggregates"]
    present = {line.key for line in lines}
    seen: set[tuple[str, int]] = set()
    heads: dict[str, str] = {}
    last_version: dict[str, int] = {}
    last_position = 0
    for line in lines:
        aggregate_id, version = line.key
        chain = declared.get(aggregate_id)
        if line.key in seen:
            raise _ProblemFoundError("inserted", "a second copy of an event", **line.where())
        if chain is None or not chain["first"] <= version <= chain["last"]:
            raise _ProblemFoundError(
                "inserted", "an event the header does not account for", **line.where()
            )
        expected = last_version.get(aggregate_id, chain["first"] - 1) + 1
        if version < expected or line.event["position"] <= last_position:
            raise _ProblemFoundError("reordered", "an event out of log order", **line.where())
        if version > expected:
            missing = (aggregate_id, expected)
            if missing in present:
                raise _ProblemFoundError(
                    "reordered", "an event ahead of its aggregate's earlier one", **line.where()
                )
            raise _ProblemFoundError(
                "removed",
                f"version {expected} of the aggregate is missing before this event",
                line=line.number,
                aggregate_id=aggregate_id,
                version=expected,
            )
        previous = heads.get(aggregate_id) or chain_start(aggregate_id)
        head = chain_link(previous, canonical_json(line.event))
        if head != line.hash:
            raise _ProblemFoundError(
                "altered", "the event does not match its hash chain", **line.where()
            )
        heads[aggregate_id] = head
        last_version[aggregate_id] = version
        last_position = line.event["position"]
        seen.add(line.key)
    for aggregate_id, chain in sorted(declared.items()):
        reached = last_version.get(aggregate_id, chain["first"] - 1)
        if reached < chain["last"]:
            raise _ProblemFoundError(
                "removed",
                f"the bundle ends before version {reached + 1} of the aggregate",
                aggregate_id=aggregate_id,
                version=reached + 1,
            )
        if heads[aggregate_id] != chain["head"]:
            raise _ProblemFoundError(
                "altered",
                "the aggregate's last event does not end the chain the header names",
                aggregate_id=aggregate_id,
                version=chain["last"],
            )
    if header["events"] != len(lines):
        raise _ProblemFoundError(
            "header", f"the header counts {header['events']} events, not {len(lines)}"
        )


def _check_digests(lines: list[_Line], digests: dict[str, Any]) -> None:
    expected = digests.get("read_models")
    projections = default_projections()
    fresh = reproject((entry_of(line.event) for line in lines), projections).digests()
    if not isinstance(expected, dict) or sorted(expected) != sorted(fresh):
        raise _ProblemFoundError("digest", "the bundle's read models are not this runledger's")
    for name in sorted(fresh):
        theirs, mine = expected[name], fresh[name]
        if not isinstance(theirs, dict) or theirs.get("version") != mine["version"]:
            raise _ProblemFoundError(
                "digest",
                f"{name} was digested at version {_version_of(theirs)}, "
                f"this runledger projects version {mine['version']}",
                model=name,
            )
        if theirs != mine:
            raise _ProblemFoundError(
                "digest",
                f"re-projecting the events gives {name} {_outcome(mine)}, "
                f"the bundle says {_outcome(theirs)}",
                model=name,
            )


def _version_of(outcome: object) -> object:
    return outcome.get("version") if isinstance(outcome, dict) else None


def _outcome(outcome: dict[str, Any]) -> str:
    if "digest" in outcome:
        return f"digest {str(outcome['digest'])[:16]}…"
    return f"stalled ({outcome.get('stalled')})"
