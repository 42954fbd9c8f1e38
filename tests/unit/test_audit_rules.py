"""The audit's tables that must keep up with the catalogue and the read models, and its chain."""

from __future__ import annotations

import hashlib

import pytest

from runledger.domain.audit_chain import chain_link, chain_start, chain_start_v1
from runledger.domain.catalogue import WIRE_NAMES
from runledger.infrastructure.audit.summaries import FAMILIES, SUMMARIES, summarise, text
from runledger.infrastructure.runtime import default_projections
from runledger.projections.base import Table


def test_every_wire_name_of_the_catalogue_has_a_summary_and_nothing_else_has_one() -> None:
    assert sorted(SUMMARIES) == sorted(WIRE_NAMES)


def test_each_summary_sits_in_its_wire_names_family() -> None:
    for family, summaries in FAMILIES.items():
        assert all(name.split(".", 1)[0] == family for name in summaries), family


def test_a_summary_says_what_changed_in_one_clipped_line() -> None:
    payload = {"order": 3, "target_session_id": "s-1", "prompt": "line one\nline two " + "x" * 90}

    summary = summarise("follow-up.queued", payload)

    assert summary.startswith("follow-up #3 queued for s-1: line one line two x")
    assert "\n" not in summary
    assert summary.endswith("…")


def test_json_values_are_summarised_as_json() -> None:
    assert text({"b": [1, True], "a": None}) == '{"a":null,"b":[1,true]}'


def test_a_table_owned_across_a_session_is_owned_by_a_run() -> None:
    tables = [table for projection in default_projections() for table in projection.tables]

    assert any(table.owner is None for table in tables)
    assert all(table.owner is not None for table in tables if table.session_order is not None)


def test_a_table_refuses_an_owner_or_session_order_that_is_not_its_column() -> None:
    with pytest.raises(ValueError, match="unknown columns"):
        Table("t", columns=(("a", "text"),), key=("a",), owner="run_id")
    with pytest.raises(ValueError, match="unknown columns"):
        Table("t", columns=(("a", "text"),), key=("a",), owner="a", session_order=("a", "b"))


def test_a_chain_starts_from_the_header_and_its_aggregate_and_links_each_event_to_the_last():
    aggregate = "6f1c1a4e-0000-5000-8000-000000000001"
    header = "ab" * 32
    h0 = chain_start(aggregate, header)
    event = '{"position":1}'

    assert (
        h0
        == hashlib.sha256(f"runledger-audit-chain-v2\0{header}\0{aggregate}".encode()).hexdigest()
    )
    assert chain_link(h0, event) == hashlib.sha256((h0 + event).encode()).hexdigest()
    assert chain_start("another", header) != h0
    assert chain_start(aggregate, "cd" * 32) != h0


def test_a_format_1_chain_started_from_its_aggregate_alone() -> None:
    aggregate = "6f1c1a4e-0000-5000-8000-000000000001"

    assert (
        chain_start_v1(aggregate)
        == hashlib.sha256(f"runledger-audit-chain-v1\0{aggregate}".encode()).hexdigest()
    )


def test_a_tombstone_summary_names_its_runs_events_bundle_and_digest() -> None:
    payload = {
        "run_ids": ["root", "child"],
        "events": 12,
        "bundle": "/archive/tree-1.jsonl",
        "bundle_sha256": "ab" * 32,
    }

    assert summarise("run-tree.archived", payload) == (
        f"tree of 2 run(s) archived: 12 events to /archive/tree-1.jsonl (sha256 {'ab' * 32})"
    )


def test_a_restore_summary_names_its_events_and_bundle() -> None:
    payload = {"events": 12, "bundle": "/archive/tree-1.jsonl"}

    assert summarise("run-tree.restored", payload) == (
        "tree restored: 12 events from /archive/tree-1.jsonl"
    )
