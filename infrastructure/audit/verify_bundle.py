"""``verify_bundle``: check an export bundle with no store and no database.

In order: the header (format, run, catalogue against this runledger's, the shape of its
chains), the event lines (each aggregate's hash chain, seeded by the header, versions and log
order), then the read models re-projected from the bundle's events against the digests it
carries. The first problem found is the verdict, named as one of: ``header`` (malformed, or
changed after its events were chained), ``altered`` (an event's content or hash does not
chain), ``removed`` (a version the header promises is missing), ``inserted`` (an event the
header does not account for, or a second copy), ``reordered`` (events out of log or version
order) and ``digest`` (the re-projection does not give the digests the bundle carries).

Whatever the file holds, the answer is a verdict: the reader trusts no line's shape, only
what it checked. Lines are split on ``\\n`` alone (``bundle_format``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeGuard

import orjson

from runledger.domain.audit_chain import chain_link, chain_start, chain_start_v1
from runledger.domain.canonical import loaded_canonical_json
from runledger.domain.errors import BundleReadError, WorkflowError
from runledger.domain.records import BundleProblem, BundleVerdict
from runledger.infrastructure.audit.bundle_format import (
    CHAINS,
    DIGEST_KEYS,
    FIRST_LINE_KEYS,
    FORMAT,
    HEADS,
    LINE_KEYS,
    catalogue,
    entry_of,
    header_digest,
    is_event_object,
)
from runledger.infrastructure.audit.reprojection import Reprojection, reproject
from runledger.infrastructure.collector import collector_paused
from runledger.infrastructure.runtime import default_projections
from runledger.projections.base import rows_version


class Detail:
    """Each verdict's words: a clause with its own subject, read after the problem's name
    (``altered: the event does not match its hash chain``), with named fields."""

    EMPTY: Final = "the bundle is empty"
    NOT_A_HEADER: Final = "the first line is not a bundle header"
    FORMAT: Final = "the file is not a {format} of a version this runledger reads ({versions})"
    CHAIN: Final = "the header describes another hash chain than its format version's"
    RUN: Final = "the header's run is not among its runs"
    NO_CATALOGUE: Final = "the header has no event catalogue"
    UNKNOWN_WIRE_NAME: Final = "the header declares wire name {wire_name!r}, unknown here"
    CLASS_VERSION: Final = (
        "the header declares {wire_name} at class version {declared!r}, "
        "but this runledger reads versions 1 to {readable}"
    )
    FIELDS: Final = (
        "the header declares {wire_name} class version {declared} with other fields "
        "than this runledger's"
    )
    AGGREGATES: Final = "the header's aggregate chains are malformed"
    EVENT_COUNT: Final = "the header does not count its events"
    NOT_PLAIN: Final = "the header is not plain JSON"
    REBOUND: Final = "the header was changed after its events were chained to it"
    COUNT: Final = "the header counts {declared} events, but the bundle holds {held}"
    NO_DIGESTS: Final = "the read-model digests are missing"
    NOT_DIGESTS: Final = "the last line is not the read-model digests"
    NOT_AN_EVENT: Final = "this line is not an event line of the bundle"
    NOT_EVENT_FIELDS: Final = "the event's fields are not a bundle event's"
    LINE_FIELDS: Final = "the line holds other fields than a bundle event line's"
    SEED: Final = "the line's header digest is not the one its chain starts from"
    COPY: Final = "this event is a second copy of an earlier one"
    UNACCOUNTED: Final = "the header does not account for this event"
    OUT_OF_ORDER: Final = "this event is out of log order"
    AHEAD: Final = "this event comes before an earlier version of its aggregate"
    MISSING: Final = "version {version} of the aggregate is missing before this event"
    UNCHAINED: Final = "the event does not match its hash chain"
    ENDS_EARLY: Final = "the bundle ends before version {version} of the aggregate"
    HEAD: Final = "the aggregate's last event does not end the chain the header names"
    MODELS: Final = "the bundle's read models are not this runledger's"
    MODEL_VERSION: Final = (
        "{model} was digested at version {declared!r}, "
        "but this runledger checks the digests of {readable}"
    )
    MODEL_DIGEST: Final = (
        "re-projecting the events gives {model} {ours}, but the bundle says {theirs}"
    )


class _ProblemFoundError(Exception):
    """The first problem of the bundle: becomes the verdict."""

    def __init__(self, problem: BundleProblem, detail: str, **where: Any) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.where = where


@dataclass(frozen=True)
class _Chain:
    first: int
    last: int
    head: str


@dataclass(frozen=True)
class _Header:
    line: int
    run_id: str
    events: int
    chains: dict[str, _Chain]
    digest: str | None
    """What format 2 seeds each chain with; None for format 1, whose chains are unseeded."""

    def start(self, aggregate_id: str) -> str:
        if self.digest is None:
            return chain_start_v1(aggregate_id)
        return chain_start(aggregate_id, self.digest)


@dataclass(slots=True)
class _Line:
    number: int
    event: dict[str, Any]
    hash: Any
    seed: object
    """The line's ``header`` (an aggregate's first line's), else None."""
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
    verdict, _ = checked_bundle(_read(path))
    return verdict


def checked_bundle(data: bytes) -> tuple[BundleVerdict, Reprojection | None]:
    """The verdict on a bundle's bytes, and, when it is ok, the re-projection of its events
    (at the positions it gives them) that gave its digests: a restore checks the live rows
    against that one, rather than re-projecting the same events once more."""
    with collector_paused():
        return _verify(_lines(data))


def _read(path: object) -> bytes:
    """The bytes of the bundle file at ``path`` (``BundleReadError`` when it cannot be read)."""
    if not isinstance(path, (str, os.PathLike)):
        raise BundleReadError(path=path, reason="the path must be text or a path")
    try:
        return Path(os.fsdecode(path)).read_bytes()
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise BundleReadError(path=str(path), reason=reason) from None


def _verify(lines: list[tuple[int, bytes]]) -> tuple[BundleVerdict, Reprojection | None]:
    run_id: str | None = None
    events = 0
    try:
        header = _header(lines)
        run_id = header.run_id
        parsed, digests = _body(lines, seeded=header.digest is not None)
        events = len(parsed)
        _check_chains(header, parsed)
        reprojection = _check_digests(parsed, digests)
    except _ProblemFoundError as found:
        verdict = BundleVerdict(
            ok=False,
            run_id=run_id,
            events=events,
            problem=found.problem,
            detail=found.detail,
            **found.where,
        )
        return verdict, None
    verdict = BundleVerdict(ok=True, run_id=run_id, events=events, problem=None, detail=None)
    return verdict, reprojection


def _lines(data: bytes) -> list[tuple[int, bytes]]:
    # "\n" alone ends a line: canonical JSON leaves U+2028, U+2029 and U+0085 unescaped inside
    # strings, and str.splitlines would cut an event's text there. orjson checks the UTF-8.
    return [
        (number, line) for number, line in enumerate(data.split(b"\n"), start=1) if line.strip()
    ]


def _json(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def _canonical(value: Any) -> bytes | None:
    """The canonical JSON of a parsed value, or None for one nested past what it writes."""
    try:
        return loaded_canonical_json(value)
    except (WorkflowError, RecursionError):
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _header(lines: list[tuple[int, bytes]]) -> _Header:
    if not lines:
        raise _ProblemFoundError("header", Detail.EMPTY, line=1)
    number = lines[0][0]
    header = _json(lines[0][1])
    if not isinstance(header, dict) or header.get("kind") != "header":
        raise _ProblemFoundError("header", Detail.NOT_A_HEADER, line=number)
    version = header.get("format_version")
    if header.get("format") != FORMAT or not _is_int(version) or version not in CHAINS:
        versions = ", ".join(str(known) for known in CHAINS)
        raise _ProblemFoundError(
            "header", Detail.FORMAT.format(format=FORMAT, versions=versions), line=number
        )
    if header.get("chain") != CHAINS[version]:
        raise _ProblemFoundError("header", Detail.CHAIN, line=number)
    run_id, runs = header.get("run_id"), header.get("runs")
    if not isinstance(run_id, str) or not isinstance(runs, list) or run_id not in runs:
        raise _ProblemFoundError("header", Detail.RUN, line=number)
    _check_catalogue(header.get("catalogue"), number)
    events = header.get("events")
    if not _is_int(events) or events < 0:
        raise _ProblemFoundError("header", Detail.EVENT_COUNT, line=number)
    chains = _chains(header, version)
    if chains is None:
        raise _ProblemFoundError("header", Detail.AGGREGATES, line=number)
    digest = None
    if version > 1:
        try:
            digest = header_digest(header)
        except (WorkflowError, RecursionError):
            raise _ProblemFoundError("header", Detail.NOT_PLAIN, line=number) from None
    return _Header(number, run_id, events, chains, digest)


def _chains(header: dict[str, Any], version: int) -> dict[str, _Chain] | None:
    """Each aggregate's span and head, or None when the header's shape is not its format's:
    format 1 keeps each head beside its span, format 2 apart (under ``heads``)."""
    aggregates = header.get("aggregates")
    if not isinstance(aggregates, dict):
        return None
    heads: Any
    if version == 1:
        heads = {
            aggregate_id: span.get("head") if isinstance(span, dict) else None
            for aggregate_id, span in aggregates.items()
        }
        keys = {"first", "last", "head"}
    else:
        heads = header.get(HEADS)
        keys = {"first", "last"}
        if not isinstance(heads, dict) or heads.keys() != aggregates.keys():
            return None
    chains: dict[str, _Chain] = {}
    for aggregate_id, span in aggregates.items():
        head = heads[aggregate_id]
        if (
            not isinstance(span, dict)
            or span.keys() != keys
            or not (_is_int(span["first"]) and _is_int(span["last"]))
            or not 1 <= span["first"] <= span["last"]
            or not isinstance(head, str)
        ):
            return None
        chains[aggregate_id] = _Chain(span["first"], span["last"], head)
    return chains


def _check_catalogue(theirs: object, line: int) -> None:
    """Every wire name the bundle declares must read back with this runledger: known here,
    at most this class version, and with this version's fields when it is this version."""
    ours = catalogue()
    if not isinstance(theirs, dict):
        raise _ProblemFoundError("header", Detail.NO_CATALOGUE, line=line)
    for wire_name, declared in sorted(theirs.items()):
        mine = ours.get(wire_name)
        if mine is None:
            raise _ProblemFoundError(
                "header", Detail.UNKNOWN_WIRE_NAME.format(wire_name=wire_name), line=line
            )
        their_version = declared.get("class_version") if isinstance(declared, dict) else None
        readable = mine["class_version"]
        if not _is_int(their_version) or not 1 <= their_version <= readable:
            raise _ProblemFoundError(
                "header",
                Detail.CLASS_VERSION.format(
                    wire_name=wire_name, declared=their_version, readable=readable
                ),
                line=line,
            )
        if their_version == readable and declared.get("fields") != mine["fields"]:
            raise _ProblemFoundError(
                "header",
                Detail.FIELDS.format(wire_name=wire_name, declared=their_version),
                line=line,
            )


def _body(lines: list[tuple[int, bytes]], *, seeded: bool) -> tuple[list[_Line], dict[str, Any]]:
    if len(lines) < 2:
        raise _ProblemFoundError("digest", Detail.NO_DIGESTS, line=None)
    number, last = lines[-1]
    digests = _json(last)
    if (
        not isinstance(digests, dict)
        or digests.keys() != DIGEST_KEYS
        or digests["kind"] != "digests"
    ):
        raise _ProblemFoundError("digest", Detail.NOT_DIGESTS, line=number)
    parsed: list[_Line] = []
    for number, text in lines[1:-1]:
        line = _json(text)
        if not isinstance(line, dict) or line.get("kind") != "event":
            raise _ProblemFoundError("inserted", Detail.NOT_AN_EVENT, line=number)
        if not is_event_object(line.get("event")):
            raise _ProblemFoundError("altered", Detail.NOT_EVENT_FIELDS, line=number)
        if line.keys() != LINE_KEYS and not (seeded and line.keys() == FIRST_LINE_KEYS):
            raise _ProblemFoundError("altered", Detail.LINE_FIELDS, line=number)
        parsed.append(_Line(number, line["event"], line.get("hash"), line.get("header")))
    return parsed, digests


def _check_chains(header: _Header, lines: list[_Line]) -> None:
    declared = header.chains
    present = {line.key for line in lines}
    seen: set[tuple[str, int]] = set()
    heads: dict[str, str] = {}
    last_version: dict[str, int] = {}
    last_position = 0
    for line in lines:
        aggregate_id, version = line.key
        chain = declared.get(aggregate_id)
        if line.key in seen:
            raise _ProblemFoundError("inserted", Detail.COPY, **line.where())
        if chain is None or not chain.first <= version <= chain.last:
            raise _ProblemFoundError("inserted", Detail.UNACCOUNTED, **line.where())
        expected = last_version.get(aggregate_id, chain.first - 1) + 1
        if version < expected or line.event["position"] <= last_position:
            raise _ProblemFoundError("reordered", Detail.OUT_OF_ORDER, **line.where())
        if version > expected:
            if (aggregate_id, expected) in present:
                raise _ProblemFoundError("reordered", Detail.AHEAD, **line.where())
            raise _ProblemFoundError(
                "removed",
                Detail.MISSING.format(version=expected),
                line=line.number,
                aggregate_id=aggregate_id,
                version=expected,
            )
        canonical = _canonical(line.event)
        if canonical is None:
            raise _ProblemFoundError("altered", Detail.UNCHAINED, **line.where())
        previous = heads.get(aggregate_id)
        if previous is None:
            previous = _seed(header, line, canonical)
        elif line.seed is not None:
            raise _ProblemFoundError("altered", Detail.LINE_FIELDS, **line.where())
        head = chain_link(previous, canonical)
        if head != line.hash:
            raise _ProblemFoundError("altered", Detail.UNCHAINED, **line.where())
        heads[aggregate_id] = head
        last_version[aggregate_id] = version
        last_position = line.event["position"]
        seen.add(line.key)
    for aggregate_id, chain in sorted(declared.items()):
        reached = last_version.get(aggregate_id, chain.first - 1)
        if reached < chain.last:
            raise _ProblemFoundError(
                "removed",
                Detail.ENDS_EARLY.format(version=reached + 1),
                aggregate_id=aggregate_id,
                version=reached + 1,
            )
        if heads[aggregate_id] != chain.head:
            raise _ProblemFoundError(
                "altered", Detail.HEAD, aggregate_id=aggregate_id, version=chain.last
            )
    if header.events != len(lines):
        raise _ProblemFoundError(
            "header",
            Detail.COUNT.format(declared=header.events, held=len(lines)),
            line=header.line,
        )


def _seed(header: _Header, line: _Line, canonical: bytes) -> str:
    """``h_0`` of the chain an aggregate's first line starts. In format 2 the line names the
    header digest it was chained to: when that is not this header's but the line chains from
    it, the header is what changed; when it chains from neither, the line is."""
    if header.digest is None or line.seed == header.digest:
        return header.start(line.key[0])
    aggregate_id = line.key[0]
    if isinstance(line.seed, str) and (
        chain_link(chain_start(aggregate_id, line.seed), canonical) == line.hash
    ):
        raise _ProblemFoundError("header", Detail.REBOUND, line=header.line)
    raise _ProblemFoundError("altered", Detail.SEED, **line.where())


def _check_digests(lines: list[_Line], digests: dict[str, Any]) -> Reprojection:
    expected = digests.get("read_models")
    projections = {projection.name: projection for projection in default_projections()}
    reprojection = reproject((entry_of(line.event) for line in lines), list(projections.values()))
    fresh = reprojection.digests()
    if not isinstance(expected, dict) or sorted(expected) != sorted(fresh):
        raise _ProblemFoundError("digest", Detail.MODELS)
    for name in sorted(fresh):
        theirs, mine = expected[name], fresh[name]
        since, version = rows_version(projections[name]), projections[name].version
        declared = _version_of(theirs)
        # A bundle of an earlier version whose rows this one keeps has the same digest.
        if type(declared) is not int or not since <= declared <= version:
            readable = (
                f"version {version}" if since == version else f"versions {since} to {version}"
            )
            raise _ProblemFoundError(
                "digest",
                Detail.MODEL_VERSION.format(model=name, declared=declared, readable=readable),
                model=name,
            )
        if {**theirs, "version": version} != mine:
            raise _ProblemFoundError(
                "digest",
                Detail.MODEL_DIGEST.format(
                    model=name, ours=_outcome(mine), theirs=_outcome(theirs)
                ),
                model=name,
            )
    return reprojection


def _version_of(outcome: object) -> object:
    return outcome.get("version") if isinstance(outcome, dict) else None


def _outcome(outcome: dict[str, Any]) -> str:
    if "digest" in outcome:
        return f"digest {str(outcome['digest'])[:16]}…"
    return f"stalled ({outcome.get('stalled')})"
