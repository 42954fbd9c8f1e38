"""export_run and the offline verify_bundle, on every backend: an intact bundle of the demo's
failed run checks out, and each way of tampering with it is named."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runledger.domain.errors import (
    BundleReadError,
    BundleWriteError,
    InvalidAuditArgumentError,
    InvalidProgressError,
    RunNotFoundError,
)
from runledger.infrastructure import open_store, verify_bundle
from runledger.infrastructure.store import WorkflowStore
from tests.integration.conftest import BACKENDS
from tests.support.audit import event_lines, play_demo, read_lines, write_lines
from tests.support.clock import FakeClock


@pytest.fixture
def demo(store: WorkflowStore):
    return play_demo(store)


@dataclass(frozen=True)
class Exported:
    path: Path
    run_id: str


@pytest.fixture(scope="module", params=BACKENDS)
def exported(request, tmp_path_factory) -> Iterator[Exported]:
    """The demo's failed run exported once per backend; tests tamper with copies of it."""
    folder = tmp_path_factory.mktemp("exported")
    path = folder / "failed-run.jsonl"

    def export(url: str) -> Exported:
        with open_store(url, clock=FakeClock()) as store:
            demo = play_demo(store)
            store.export_run(demo.logged_run, path)
        return Exported(path, demo.logged_run)

    if request.param == "memory":
        yield export("memory://")
    elif request.param == "sqlite":
        yield export(f"sqlite:///{folder / 'store.db'}")
    else:
        with request.getfixturevalue("postgres_databases").lend() as url:
            yield export(url)


@pytest.fixture
def bundle(exported: Exported, tmp_path: Path) -> Path:
    copy = tmp_path / "failed-run.jsonl"
    shutil.copyfile(exported.path, copy)
    return copy


@pytest.fixture
def memory_store() -> Iterator[WorkflowStore]:
    with open_store("memory://", clock=FakeClock()) as store:
        yield store


def test_an_exported_bundle_verifies_offline(store, demo, tmp_path) -> None:
    path = tmp_path / "failed-run.jsonl"
    written = store.export_run(demo.logged_run, path)

    verdict = verify_bundle(path)

    assert verdict.ok, verdict
    assert verdict.run_id == demo.logged_run
    assert verdict.events == written == len(store.audit_run(demo.logged_run, lineage=True).entries)


def test_a_bundle_holds_a_header_the_events_in_log_order_and_the_digests(
    store, demo, tmp_path
) -> None:
    path = tmp_path / "failed-run.jsonl"
    store.export_run(demo.logged_run, path)
    lines = read_lines(path)
    header, events, digests = lines[0], lines[1:-1], lines[-1]
    trail = store.audit_run(demo.logged_run, lineage=True)

    assert header["kind"] == "header"
    assert header["run_id"] == demo.logged_run
    assert header["runs"] == trail.runs
    assert header["catalogue"]["run.created"]["class_version"] == 2
    assert [line["event"]["position"] for line in events] == [e.position for e in trail.entries]
    assert digests["kind"] == "digests"
    assert sorted(digests["read_models"]) == sorted(store.projection_names())


def test_a_bundle_without_lineage_holds_the_run_alone_and_verifies(store, demo, tmp_path) -> None:
    path = tmp_path / "alone.jsonl"

    written = store.export_run(demo.logged_run, path, lineage=False)

    assert written == len(store.audit_run(demo.logged_run).entries)
    assert read_lines(path)[0]["runs"] == [demo.logged_run]
    assert verify_bundle(path).ok


def test_export_reports_progress_over_every_event_twice(store, demo, tmp_path) -> None:
    seen: list[int] = []

    written = store.export_run(demo.logged_run, tmp_path / "b.jsonl", progress=seen.append)

    assert sum(seen) == 2 * written


# -- tampering ------------------------------------------------------------------------------


def finished_line(lines) -> int:
    return next(i for i in event_lines(lines) if lines[i]["event"]["wire_name"] == "run.finished")


def test_an_altered_event_is_named(bundle) -> None:
    lines = read_lines(bundle)
    index = finished_line(lines)
    lines[index]["event"]["state"]["error"] = "all tests passed"
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.ok, verdict.problem) == (False, "altered")
    assert verdict.line == index + 1
    assert verdict.position == lines[index]["event"]["position"]


def test_a_removed_event_is_named_with_the_missing_version(bundle) -> None:
    lines = read_lines(bundle)
    index = finished_line(lines)
    removed = lines.pop(index)["event"]
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "removed"
    assert (verdict.aggregate_id, verdict.version) == (
        removed["aggregate_id"],
        removed["version"],
    )


def test_a_removed_last_event_is_named_too(bundle) -> None:
    lines = read_lines(bundle)
    last = event_lines(lines)[-1]
    removed = lines.pop(last)["event"]
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "removed"
    assert (verdict.aggregate_id, verdict.version) == (
        removed["aggregate_id"],
        removed["version"],
    )


def test_an_inserted_copy_of_an_event_is_named(bundle) -> None:
    lines = read_lines(bundle)
    index = finished_line(lines)
    lines.insert(index + 1, lines[index])
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "inserted"
    assert verdict.line == index + 2


def test_an_inserted_new_event_is_named(bundle) -> None:
    lines = read_lines(bundle)
    index = finished_line(lines)
    forged = {**lines[index], "event": {**lines[index]["event"]}}
    forged["event"]["version"] += 100
    forged["event"]["position"] = lines[event_lines(lines)[-1]]["event"]["position"] + 1
    lines.insert(event_lines(lines)[-1] + 1, forged)
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "inserted"
    assert verdict.version == forged["event"]["version"]


def test_reordered_events_are_named(bundle) -> None:
    lines = read_lines(bundle)
    index = finished_line(lines)
    lines[index], lines[index + 1] = lines[index + 1], lines[index]
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "reordered"
    assert verdict.line == index + 2


def test_reordered_events_of_one_aggregate_are_named(bundle) -> None:
    lines = read_lines(bundle)
    run_of = lines[finished_line(lines)]["event"]["aggregate_id"]
    first, second = [i for i in event_lines(lines) if lines[i]["event"]["aggregate_id"] == run_of][
        :2
    ]
    lines[first], lines[second] = lines[second], lines[first]
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "reordered"
    assert verdict.line == first + 1


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda header: header.update(run_id="another-run"), id="run"),
        pytest.param(lambda header: header.update(format_version=99), id="format"),
        pytest.param(
            lambda header: header["catalogue"]["run.created"].update(class_version=9),
            id="catalogue-version",
        ),
        pytest.param(
            lambda header: header["catalogue"]["run.finished"]["fields"].append("verdict"),
            id="catalogue-fields",
        ),
        pytest.param(lambda header: header.update(events=header["events"] + 1), id="count"),
    ],
)
def test_a_tampered_header_is_named(bundle, tamper) -> None:
    lines = read_lines(bundle)
    tamper(lines[0])
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "header", verdict


def test_a_tampered_digest_is_named_with_its_read_model(bundle) -> None:
    lines = read_lines(bundle)
    lines[-1]["read_models"]["terminal_data"]["digest"] = "0" * 64
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.problem, verdict.model) == ("digest", "terminal_data")


def test_a_removed_digest_line_is_named(bundle) -> None:
    lines = read_lines(bundle)
    write_lines(bundle, lines[:-1])

    assert verify_bundle(bundle).problem == "digest"


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [None, 42, ["a"], b"bytes", "", "with\0nul"])
def test_export_refuses_a_path_that_is_not_a_file_name(
    memory_store, path, tmp_path, monkeypatch
) -> None:
    demo = play_demo(memory_store)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BundleWriteError):
        memory_store.export_run(demo.logged_run, path)
    assert list(tmp_path.iterdir()) == []


def test_export_into_a_missing_folder_is_refused_and_writes_nothing(memory_store, tmp_path):
    demo = play_demo(memory_store)
    with pytest.raises(BundleWriteError, match="No such file or directory"):
        memory_store.export_run(demo.logged_run, tmp_path / "missing" / "b.jsonl")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"run_id": "no-such-run"}, RunNotFoundError),
        ({"lineage": 1}, InvalidAuditArgumentError),
        ({"progress": "print"}, InvalidProgressError),
    ],
)
def test_export_refuses_bad_arguments_before_writing(
    memory_store, tmp_path, arguments, error
) -> None:
    demo = play_demo(memory_store)
    call = {"run_id": demo.logged_run, "path": tmp_path / "b.jsonl", **arguments}
    with pytest.raises(error):
        memory_store.export_run(**call)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", [None, 42, "/no/such/bundle.jsonl"])
def test_verify_bundle_refuses_what_it_cannot_read(path) -> None:
    with pytest.raises(BundleReadError):
        verify_bundle(path)


def test_a_file_that_is_no_bundle_is_named_a_header_problem(tmp_path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes\n", encoding="utf-8")

    assert verify_bundle(path).problem == "header"
