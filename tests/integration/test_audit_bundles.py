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
from runledger.infrastructure.audit.verify_bundle import Detail
from runledger.infrastructure.store import WorkflowStore
from tests.integration.conftest import BACKENDS
from tests.support.audit import event_lines, play_demo, read_lines, write_lines
from tests.support.clock import FakeClock

FIXTURES = Path(__file__).parents[1] / "fixtures"
LINE_BREAKS = ["\u2028", "\u2029", "\u0085"]


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
        pytest.param(lambda header: header["aggregates"].clear(), id="aggregates"),
        pytest.param(lambda header: header.pop("heads"), id="heads-missing"),
        pytest.param(lambda header: header["chain"].update(algorithm="md5"), id="chain"),
    ],
)
def test_a_tampered_header_is_named(bundle, tamper) -> None:
    lines = read_lines(bundle)
    tamper(lines[0])
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "header", verdict


def first_run(header: dict) -> str:
    return next(run for run in header["runs"] if run != header["run_id"])


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda header: header.update(run_id=first_run(header)), id="run-id"),
        pytest.param(lambda header: header.update(store_version="0.0.1"), id="store-version"),
        pytest.param(lambda header: header["catalogue"].pop("effect.settled"), id="catalogue"),
        pytest.param(lambda header: header.update(lineage=False), id="lineage"),
        pytest.param(lambda header: header["runs"].reverse(), id="runs"),
    ],
)
def test_a_header_changed_so_that_it_still_reads_well_is_named_changed(bundle, tamper) -> None:
    lines = read_lines(bundle)
    tamper(lines[0])
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.problem, verdict.detail, verdict.line) == ("header", Detail.REBOUND, 1)


def test_a_header_changed_with_its_digest_on_the_first_line_is_named_an_altered_line(
    bundle,
) -> None:
    lines = read_lines(bundle)
    lines[0]["store_version"] = "0.0.1"
    first = event_lines(lines)[0]
    lines[first]["header"] = "0" * 64
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.problem, verdict.line) == ("altered", first + 1)


@pytest.mark.parametrize("seed", [[], 42, None, "0" * 64])
def test_a_first_line_naming_another_header_digest_is_named_altered(bundle, seed) -> None:
    lines = read_lines(bundle)
    first = event_lines(lines)[0]
    lines[first]["header"] = seed
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.problem, verdict.detail, verdict.line) == ("altered", Detail.SEED, first + 1)


def test_an_aggregate_cut_short_with_its_header_span_edited_to_match_is_named(bundle) -> None:
    """Before the header was bound, dropping an aggregate's last event and editing its span,
    head and the count to match verified."""
    lines = read_lines(bundle)
    header = lines[0]
    aggregate = next(a for a, span in header["aggregates"].items() if span["last"] > span["first"])
    of_aggregate = [i for i in event_lines(lines) if lines[i]["event"]["aggregate_id"] == aggregate]
    lines.pop(of_aggregate[-1])
    header["aggregates"][aggregate]["last"] -= 1
    header["events"] -= 1
    header["heads"][aggregate] = lines[of_aggregate[-2]]["hash"]
    write_lines(bundle, lines)

    assert verify_bundle(bundle).problem == "header"


def test_an_edited_chain_head_is_named_altered(bundle) -> None:
    lines = read_lines(bundle)
    aggregate = next(iter(lines[0]["heads"]))
    lines[0]["heads"][aggregate] = "0" * 64
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.problem, verdict.detail, verdict.aggregate_id) == (
        "altered",
        Detail.HEAD,
        aggregate,
    )


@pytest.mark.parametrize(
    "span",
    [
        {"first": 2, "last": 1},
        {"first": 0, "last": 0},
        {"first": 1},
        {"first": True, "last": 1},
        {"first": 1, "last": "2"},
        "1-2",
    ],
)
def test_a_forged_aggregate_in_the_header_is_a_header_verdict(bundle, span) -> None:
    lines = read_lines(bundle)
    lines[0]["aggregates"]["forged"] = span
    lines[0]["heads"]["forged"] = "x"
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.problem, verdict.detail) == ("header", Detail.AGGREGATES)


def test_a_forged_aggregate_with_no_events_is_named_a_header_change(bundle) -> None:
    lines = read_lines(bundle)
    lines[0]["aggregates"]["forged"] = {"first": 1, "last": 1}
    lines[0]["heads"]["forged"] = "x"
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert verdict.problem == "header"


@pytest.mark.parametrize("extra", ["note", "header"])
def test_an_event_line_with_a_field_of_its_own_is_named_altered(bundle, extra) -> None:
    lines = read_lines(bundle)
    index = finished_line(lines)
    lines[index][extra] = "added"
    write_lines(bundle, lines)

    verdict = verify_bundle(bundle)

    assert (verdict.problem, verdict.detail, verdict.line) == (
        "altered",
        Detail.LINE_FIELDS,
        index + 1,
    )


def test_a_digests_line_with_a_field_of_its_own_is_named(bundle) -> None:
    lines = read_lines(bundle)
    lines[-1]["note"] = "added"
    write_lines(bundle, lines)

    assert verify_bundle(bundle).problem == "digest"


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


# -- text holding Unicode line breaks -----------------------------------------------------


@pytest.mark.parametrize("line_break", LINE_BREAKS, ids=["U+2028", "U+2029", "U+0085"])
def test_a_run_whose_text_holds_a_unicode_line_break_exports_a_bundle_that_verifies(
    store, tmp_path, line_break
) -> None:
    text = f"a{line_break}b"
    store.create_run("run-lines", workflow_name="review", input={"text": text}, title=text)
    store.finish_run("run-lines", status="completed", final_output={"said": text})
    path = tmp_path / "lines.jsonl"

    written = store.export_run("run-lines", path)
    verdict = verify_bundle(path)

    assert (verdict.ok, verdict.events) == (True, written), verdict
    # One record a line even for tools that split on Unicode line breaks, and the text kept.
    assert len(path.read_text(encoding="utf-8").splitlines()) == written + 2
    created = read_lines(path)[1]["event"]["state"]
    assert created["input"] == {"text": text}


@pytest.mark.parametrize("name", ["bundle_v1_demo.jsonl", "bundle_v1_lines.jsonl"])
def test_a_bundle_of_format_1_still_verifies(name) -> None:
    """Written by the format-1 writer; the second holds U+2028, U+2029 and U+0085 unescaped,
    which the reader of format 1 cut into lines of their own."""
    path = FIXTURES / name

    verdict = verify_bundle(path)

    assert verdict.ok, verdict
    assert verdict.events == read_lines(path)[0]["events"]


def test_a_format_1_bundle_keeps_its_header_checks(tmp_path) -> None:
    path = tmp_path / "v1.jsonl"
    lines = read_lines(FIXTURES / "bundle_v1_demo.jsonl")
    aggregate = next(iter(lines[0]["aggregates"]))
    lines[0]["aggregates"][aggregate]["head"] = "0" * 64
    write_lines(path, lines)

    assert verify_bundle(path).problem == "altered"


def test_a_format_1_event_is_still_checked_against_its_chain(tmp_path) -> None:
    path = tmp_path / "v1.jsonl"
    lines = read_lines(FIXTURES / "bundle_v1_lines.jsonl")
    lines[1]["event"]["state"]["input"] = {"text": "changed"}
    write_lines(path, lines)

    verdict = verify_bundle(path)

    assert (verdict.problem, verdict.detail, verdict.line) == ("altered", Detail.UNCHAINED, 2)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (None, "to None: the path must be text or a path"),
        (42, "to 42: the path must be text or a path"),
        (["a"], r"to \['a'\]: the path must be text or a path"),
        (b"bytes", "to b'bytes': the path must be text or a path"),
        # ``Path`` would make it the current folder, which the OS refuses as "busy".
        ("", 'to "": the path is empty'),
        # Shown escaped: no NUL goes to the terminal.
        ("with\0nul", r"to with\\0nul: the path must be a file name"),
        # A lone surrogate: no file name holds one, and writing it would fail to encode.
        ("lone\ud800.jsonl", r"to lone\\ud800.jsonl: the path must be a file name"),
    ],
)
def test_export_refuses_a_path_that_is_not_a_file_name(
    memory_store, path, message, tmp_path, monkeypatch
) -> None:
    demo = play_demo(memory_store)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BundleWriteError, match=message):
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
