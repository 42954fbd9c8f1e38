"""Whatever a bundle file holds, ``verify_bundle`` answers with a verdict, never a traceback;
and a verdict of ok means the file holds exactly the genuine bundle's records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.audit_chain import chain_link, chain_start
from runledger.domain.canonical import canonical_json
from runledger.domain.records import BundleVerdict
from runledger.infrastructure import open_store, verify_bundle
from runledger.infrastructure.audit.bundle_format import CHAINS, FORMAT, header_digest
from tests.support.audit import play_demo, read_lines
from tests.support.clock import FakeClock

# JSON a bundle line can hold (orjson writes it): text with Unicode line breaks among the rest.
texts = st.text(
    st.one_of(
        st.characters(exclude_categories=["Cs"]),
        st.sampled_from(["\u2028", "\u2029", "\u0085", "\n", '"', "\\"]),
    ),
    max_size=12,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=8,
)
raw_lines = st.one_of(
    st.binary(max_size=40),
    json_values.map(orjson.dumps),
    st.sampled_from([b"{", b"[]", b"null", b'{"kind":"event"}', b'{"kind":"digests"}', b"\xff"]),
)


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The demo's failed run, exported once: the records every example starts from."""
    path = tmp_path_factory.mktemp("genuine") / "bundle.jsonl"
    with open_store("memory://", clock=FakeClock()) as store:
        store.export_run(play_demo(store).logged_run, path)
    assert verify_bundle(path).ok
    return read_lines(path)


def write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines) + b"\n")


def encoded(records: list[Any]) -> list[bytes]:
    return [orjson.dumps(record) for record in records]


def edit(value: Any, route: list[int], new: Any) -> Any:
    """``value`` with the node that ``route`` picks (index by index) replaced by ``new``."""
    if not route or not isinstance(value, (dict, list)) or not value:
        return new
    if isinstance(value, dict):
        key = sorted(value)[route[0] % len(value)]
        return {**value, key: edit(value[key], route[1:], new)}
    index = route[0] % len(value)
    return [*value[:index], edit(value[index], route[1:], new), *value[index + 1 :]]


mutation = st.one_of(
    st.tuples(st.just("drop"), st.integers(0, 10_000)),
    st.tuples(st.just("copy"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("swap"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("raw"), st.integers(0, 10_000), raw_lines),
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(
        st.just("edit"),
        st.integers(0, 10_000),
        st.lists(st.integers(0, 50), max_size=5),
        json_values,
    ),
)


def mutate(lines: list[bytes], records: list[Any], change: tuple[Any, ...]) -> None:
    kind, at = change[0], change[1] % len(lines)
    if kind == "drop":
        del lines[at], records[at]
    elif kind == "copy":
        to = change[2] % (len(lines) + 1)
        lines.insert(to, lines[at])
        records.insert(to, records[at])
    elif kind == "swap":
        other = change[2] % len(lines)
        lines[at], lines[other] = lines[other], lines[at]
        records[at], records[other] = records[other], records[at]
    elif kind == "raw":
        lines[at] = change[2]
        records[at] = None
    elif kind == "flip":
        line = bytearray(lines[at])
        if line:
            line[change[2] % len(line)] = change[3]
        lines[at] = bytes(line)
        records[at] = None
    else:
        records[at] = edit(records[at], change[2], change[3])
        lines[at] = orjson.dumps(records[at])


def parsed(lines: list[bytes]) -> list[Any]:
    return [orjson.loads(line) for line in lines if line.strip()]


def test_a_mutated_genuine_bundle_gets_a_verdict_and_only_the_genuine_one_is_ok(
    genuine, tmp_path_factory
) -> None:
    path = tmp_path_factory.mktemp("mutated") / "bundle.jsonl"

    @settings(max_examples=settings().max_examples)
    @given(changes=st.lists(mutation, min_size=1, max_size=3))
    def check(changes: list[tuple[Any, ...]]) -> None:
        records: list[Any] = list(genuine)
        lines = encoded(records)
        for change in changes:
            if lines:
                mutate(lines, records, change)
        write(path, lines)

        verdict = verify_bundle(path)

        assert isinstance(verdict, BundleVerdict)
        if verdict.ok:
            assert parsed(lines) == genuine
        else:
            assert verdict.problem is not None
            assert verdict.detail

    check()


def test_random_lines_get_a_verdict(tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("random") / "bundle.jsonl"

    @settings(max_examples=settings().max_examples)
    @given(lines=st.lists(raw_lines, max_size=6))
    def check(lines: list[bytes]) -> None:
        write(path, lines)

        verdict = verify_bundle(path)

        assert (verdict.ok, verdict.problem is not None) == (False, True)

    check()


def header_values(genuine: list[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Headers near the genuine one: each field its own, a plausible forgery, or any JSON."""
    real = genuine[0]

    def field(name: str, *plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(st.just(real[name]), *plausible, json_values)

    spans = st.fixed_dictionaries({"first": st.integers(-2, 5), "last": st.integers(-2, 5)})
    return st.fixed_dictionaries(
        {
            "kind": st.just("header"),
            "format": field("format", st.just(FORMAT)),
            "format_version": field("format_version", st.sampled_from([1, 2, 3, True, 2.0])),
            "run_id": field("run_id", st.sampled_from(real["runs"])),
            "runs": field("runs", st.lists(texts, max_size=3)),
            "lineage": field("lineage", st.booleans()),
            "store_version": field("store_version", texts),
            "catalogue": field("catalogue", st.dictionaries(texts, json_values, max_size=2)),
            "chain": field("chain", st.sampled_from(list(CHAINS.values()))),
            "events": field("events", st.integers(-1, 100)),
            "aggregates": field(
                "aggregates", st.dictionaries(texts, st.one_of(spans, json_values), max_size=3)
            ),
            "heads": field("heads", st.dictionaries(texts, st.one_of(texts, json_values))),
        },
        optional={"extra": json_values},
    )


def test_a_random_header_over_genuine_events_gets_a_verdict(genuine, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("headers") / "bundle.jsonl"

    @settings(max_examples=settings().max_examples)
    @given(header=header_values(genuine))
    def check(header: dict[str, Any]) -> None:
        write(path, encoded([header, *genuine[1:]]))

        verdict = verify_bundle(path)

        assert isinstance(verdict, BundleVerdict)
        if verdict.ok:
            # Canonically the same header (2.0 is 2 to the digest; the reader wants an int).
            assert canonical_json(header) == canonical_json(genuine[0])
        else:
            assert verdict.problem is not None

    check()


def forged(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a forger who rewrites every hash writes: spans, count, seeds and heads recomputed."""
    header, events, digests = dict(records[0]), records[1:-1], records[-1]
    spans: dict[str, dict[str, int]] = {}
    for line in events:
        span = spans.setdefault(line["event"]["aggregate_id"], {"first": line["event"]["version"]})
        span["last"] = line["event"]["version"]
    header.update(aggregates=spans, events=len(events))
    digest = header_digest(header)
    heads: dict[str, str] = {}
    rewritten = []
    for line in events:
        aggregate_id = line["event"]["aggregate_id"]
        previous = heads.get(aggregate_id)
        start = previous or chain_start(aggregate_id, digest)
        heads[aggregate_id] = chain_link(start, canonical_json(line["event"]))
        seed = {"header": digest} if previous is None else {}
        rewritten.append(
            {"event": line["event"], "hash": heads[aggregate_id], "kind": "event"} | seed
        )
    return [{**header, "heads": heads}, *rewritten, digests]


def test_a_forged_bundle_with_hostile_payloads_gets_a_verdict(genuine, tmp_path_factory) -> None:
    """Chains a forger recomputed carry any payload to the re-projection: a projection that
    cannot read one stalls, and the verdict names the digests."""
    path = tmp_path_factory.mktemp("forged") / "bundle.jsonl"
    events = len(genuine) - 2

    @settings(max_examples=settings().max_examples)
    @given(
        edits=st.lists(
            st.tuples(
                st.integers(0, events - 1), st.lists(st.integers(0, 50), max_size=4), json_values
            ),
            min_size=1,
            max_size=3,
        )
    )
    def check(edits: list[tuple[int, list[int], Any]]) -> None:
        records = list(genuine)
        for index, route, value in edits:
            line = records[index + 1]
            state = edit(line["event"]["state"], route, value)
            if isinstance(state, dict):
                records[index + 1] = {**line, "event": {**line["event"], "state": state}}
        write(path, encoded(forged(records)))

        verdict = verify_bundle(path)

        assert isinstance(verdict, BundleVerdict)
        assert verdict.problem in (None, "digest")

    check()
