"""Retention's first half on every backend: which run trees are settled (and, for each kept
tree, the first reason), and archiving a settled tree to a bundle that verifies."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runledger.domain.application import of_kind
from runledger.domain.errors import (
    ArchiveNotVerifiedError,
    CorruptEventError,
    InvalidArchiveFolderError,
    InvalidCutoffError,
    InvalidPageError,
)
from runledger.domain.follow_ups import FollowUp
from runledger.domain.ids import follow_up_message_id
from runledger.domain.records import ArchivedTree, KeptTree
from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.values import Actor
from runledger.infrastructure import verify_bundle
from runledger.infrastructure.audit import retention
from runledger.infrastructure.audit.retention import (
    SettledTree,
    archive_folder,
    archive_tree,
    judge_tree,
    plan_prune,
)
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from tests.support.audit import read_lines
from tests.support.sessions import session_binding

LATER = datetime(2027, 1, 1, tzinfo=UTC)
HUMAN = Actor("human", "ada")
DECISION_REQUEST = {"title": "Ship the release?", "choices": ["ship", "hold"]}


def finished(store: WorkflowStore, run_id: str, **create: object) -> None:
    store.create_run(run_id, workflow_name="review", input={"n": 1}, **create)  # type: ignore[arg-type]
    store.finish_run(run_id, status="completed", final_output={"ok": True})


def kept(runtime: StoreRuntime, settled_before: datetime = LATER) -> dict[str, KeptTree]:
    return {
        tree.root_run_id: tree for tree in plan_prune(runtime, settled_before=settled_before)[1]
    }


def settled(runtime: StoreRuntime, settled_before: datetime = LATER) -> list[SettledTree]:
    return plan_prune(runtime, settled_before=settled_before)[0]


def test_a_tree_of_ended_runs_without_live_work_is_settled(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    finished(store, "root")
    finished(store, "child", parent_run_id="root")
    finished(store, "other")

    trees = settled(runtime)

    assert [(tree.root_run_id, tree.run_ids) for tree in trees] == [
        ("root", ["root", "child"]),
        ("other", ["other"]),
    ]
    assert trees[0].events == len(store.event_log(run_id="root")) + len(
        store.event_log(run_id="child")
    )


def test_a_running_child_keeps_its_whole_tree(store: WorkflowStore, runtime: StoreRuntime) -> None:
    finished(store, "root")
    store.create_run("child", workflow_name="review", input={}, parent_run_id="root")

    tree = kept(runtime)["root"]

    assert (tree.reason, tree.detail) == ("run-not-ended", "run child is running")
    assert tree.run_ids == ["root", "child"]


def test_a_run_finished_at_or_after_the_cutoff_keeps_its_tree(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    finished(store, "recent")
    run = store.get_run("recent")
    assert run is not None
    assert run.finished_at is not None
    finished_at = run.finished_at

    assert kept(runtime, settled_before=finished_at)["recent"].reason == "finished-after-cutoff"
    assert [tree.root_run_id for tree in settled(runtime, finished_at + timedelta(seconds=1))] == [
        "recent"
    ]


def test_a_live_lease_keeps_its_tree(store: WorkflowStore, runtime: StoreRuntime) -> None:
    store.create_run("claimed", workflow_name="review", input={})
    claim = store.claim_run(
        "claimed", owner_type="controller", owner_id="worker-1", lease_ms=3_600_000
    )
    store.finish_run("claimed", status="completed", authority=claim)

    assert kept(runtime)["claimed"].reason == "live-lease"


def test_a_queued_follow_up_keeps_its_tree(store: WorkflowStore, runtime: StoreRuntime) -> None:
    store.create_run("asked", workflow_name="review", input={})
    store.bind_origin_session("asked", "session-1")
    store.queue_follow_up(
        "asked",
        request_id="r1",
        target_session_id="session-1",
        actor=HUMAN,
        source="cli",
        prompt="and then?",
    )
    store.finish_run("asked", status="completed")

    assert kept(runtime)["asked"].reason == "queued-follow-up"


def delivered_and_finished(store: WorkflowStore, run_id: str) -> None:
    """A run whose one follow-up's message was delivered, finished: a settled tree of a
    run, a follow-up and a message."""
    store.create_run(run_id, workflow_name="review", input={})
    store.bind_origin_session(run_id, "session-1", execution_mode="headless")
    queued = store.queue_follow_up(
        run_id,
        request_id="r1",
        target_session_id="session-1",
        actor=HUMAN,
        source="cli",
        prompt="and then?",
    )
    message_id = follow_up_message_id(queued.follow_up.follow_up_id)
    store.report_branch("session-1", [(message_id, "entry-1")], allowed_ids=[message_id])
    store.finish_run(run_id, status="completed")


def test_a_delivered_follow_up_does_not_keep_its_tree(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    delivered_and_finished(store, "asked")

    assert [tree.root_run_id for tree in settled(runtime)] == ["asked"]


def test_judging_a_tree_replays_its_aggregates_from_its_events_read_once(
    store: WorkflowStore, runtime: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run, its follow-up and the follow-up's message: each loaded alone was a query of
    # its own, most of a prune's judgement on PostgreSQL.
    delivered_and_finished(store, "asked")
    loaded: list[object] = []
    repository = runtime.app.repository
    get = repository.get

    def counted(aggregate_id: object, **options: object) -> object:
        loaded.append(aggregate_id)
        return get(aggregate_id, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(repository, "get", counted)

    verdict = judge_tree(runtime, ["asked"], settled_before=LATER)

    assert isinstance(verdict, SettledTree)
    assert len(verdict.versions) == 3
    assert verdict.events == len(store.event_log(run_id="asked"))
    assert loaded == []


def test_an_aggregate_of_another_kind_under_a_runs_id_is_corrupt_loaded_or_replayed(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    # Ids are derived per kind: a follow-up's events under a run's id mean changed rows.
    finished(store, "asked")
    run = runtime.app.load(Run, run_aggregate_id("asked"))
    assert run is not None

    with pytest.raises(CorruptEventError) as loaded:
        runtime.app.load(FollowUp, run_aggregate_id("asked"))
    with pytest.raises(CorruptEventError) as replayed:
        of_kind(run, FollowUp)

    for raised in (loaded, replayed):
        assert "it replays to a Run, not a FollowUp" in raised.value.message


def test_an_undelivered_terminal_message_keeps_its_tree(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    store.create_run("told", workflow_name="review", input={})
    store.bind_origin_session("told", "session-1")
    store.finish_run("told", status="completed")

    assert kept(runtime)["told"].reason == "undelivered-message"


def test_an_applying_effect_keeps_its_tree(store: WorkflowStore, runtime: StoreRuntime) -> None:
    store.create_run("charging", workflow_name="review", input={})
    store.reserve_effect("charging", effect_type="http", key="charge-1", request={"amount": 3})
    store.finish_run("charging", status="failed", error="host stopped")

    assert kept(runtime)["charging"].reason == "unsettled-effect"


def test_an_applied_effect_does_not_keep_its_tree(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    store.create_run("charged", workflow_name="review", input={})
    reservation = store.reserve_effect(
        "charged", effect_type="http", key="charge-1", request={"amount": 3}
    )
    store.settle_effect(
        reservation.effect.effect_id, attempt=reservation.effect.attempt, outcome="applied"
    )
    store.finish_run("charged", status="completed")

    assert [tree.root_run_id for tree in settled(runtime)] == ["charged"]


def test_an_ambiguous_effect_keeps_its_tree(store: WorkflowStore, runtime: StoreRuntime) -> None:
    store.create_run("unsure", workflow_name="review", input={})
    store.reserve_effect("unsure", effect_type="http", key="charge-1", request={"amount": 3})
    assert store.recover_applying_effects("unsure") == "ambiguous"
    store.finish_run("unsure", status="failed", error="host stopped")

    tree = kept(runtime)["unsure"]

    assert (tree.reason, tree.detail.endswith("is ambiguous")) == ("unsettled-effect", True)


def test_an_effect_allowed_another_attempt_keeps_its_tree(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    store.create_run("retrying", workflow_name="review", input={})
    reservation = store.reserve_effect(
        "retrying", effect_type="http", key="charge-1", request={"amount": 3}
    )
    store.settle_effect(
        reservation.effect.effect_id, attempt=reservation.effect.attempt, outcome="failed"
    )
    store.retry_effect(reservation.effect.effect_id)
    store.finish_run("retrying", status="failed", error="gave up")

    tree = kept(runtime)["retrying"]

    assert (tree.reason, tree.detail.endswith("is retry_ready")) == ("unsettled-effect", True)


def test_a_pending_human_decision_keeps_its_tree(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    store.create_run("asking", workflow_name="review", input={})
    store.request_human_decision(
        "asking", node_id="approve", attempt_id="a1", request=DECISION_REQUEST
    )
    store.finish_run("asking", status="completed")

    assert kept(runtime)["asking"].reason == "unresolved-decision"


def test_a_recording_session_segment_keeps_its_tree(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    store.create_run("recorded", workflow_name="review", input={})
    store.record_session_binding("recorded", session_binding("recorded", "pi-1"))
    store.finish_run("recorded", status="completed")

    assert kept(runtime)["recorded"].reason == "capturing-segment"


def test_the_limit_stops_after_that_many_settled_trees(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    for run_id in ("a", "b", "c"):
        finished(store, run_id)

    trees, _ = plan_prune(runtime, settled_before=LATER, limit=2)

    assert [tree.root_run_id for tree in trees] == ["a", "b"]


@pytest.mark.parametrize("cutoff", [datetime(2027, 1, 1), "2027-01-01", None, 30])
def test_a_cutoff_that_is_not_an_aware_datetime_is_refused(
    runtime: StoreRuntime, cutoff: object
) -> None:
    with pytest.raises(InvalidCutoffError):
        plan_prune(runtime, settled_before=cutoff)


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_a_limit_that_is_not_a_count_is_refused(runtime: StoreRuntime, limit: object) -> None:
    with pytest.raises(InvalidPageError, match="prune limit"):
        plan_prune(runtime, settled_before=LATER, limit=limit)


def test_archiving_writes_a_bundle_of_the_whole_tree_that_verifies(
    store: WorkflowStore, runtime: StoreRuntime, tmp_path: Path
) -> None:
    finished(store, "root")
    finished(store, "child", parent_run_id="root")
    [tree] = settled(runtime)

    archived = archive_tree(runtime, tree, archive_folder(tmp_path))

    assert isinstance(archived, ArchivedTree)
    path = Path(archived.bundle)
    assert path.parent == tmp_path
    assert archived.bundle_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    verdict = verify_bundle(path)
    assert (verdict.ok, verdict.events) == (True, tree.events)
    header, *_, digests = read_lines(path)
    assert header["runs"] == ["root", "child"]
    assert archived.versions == tree.versions
    assert archived.chain_heads == header["heads"]
    assert archived.digests == digests["read_models"]


def test_a_tree_written_to_after_it_was_judged_is_kept_not_archived(
    store: WorkflowStore, runtime: StoreRuntime, tmp_path: Path
) -> None:
    finished(store, "root")
    [tree] = settled(runtime)
    store.create_run("late-child", workflow_name="review", input={}, parent_run_id="root")

    outcome = archive_tree(runtime, tree, tmp_path)

    assert isinstance(outcome, KeptTree)
    assert outcome.reason == "changed-while-archiving"


def test_a_bundle_that_does_not_read_back_intact_is_an_error(
    store: WorkflowStore,
    runtime: StoreRuntime,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    finished(store, "root")
    [tree] = settled(runtime)
    written = retention.export_bundle  # type: ignore[attr-defined]

    def export_then_damage(*args: object, **kwargs: object) -> int:
        count = written(*args, **kwargs)  # type: ignore[arg-type]
        path = Path(args[2])  # type: ignore[arg-type]
        path.write_bytes(path.read_bytes().replace(b'"completed"', b'"failed"'))
        return count

    # The disk is what fails here, not the database: the bundle is damaged after writing.
    monkeypatch.setattr(retention, "export_bundle", export_then_damage)

    with pytest.raises(ArchiveNotVerifiedError, match="did not verify: altered"):
        archive_tree(runtime, tree, tmp_path)


@pytest.mark.parametrize("folder", ["missing-folder", None, 7])
def test_an_archive_folder_that_does_not_exist_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: object
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArchiveFolderError):
        archive_folder(folder)


def test_judging_one_tree_reads_its_runs_in_the_order_given(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    store.create_run("first", workflow_name="review", input={})
    store.create_run("second", workflow_name="review", input={})

    verdict = judge_tree(runtime, ["first", "second"], settled_before=LATER)

    assert isinstance(verdict, KeptTree)
    assert verdict.detail == "run first is running"


def test_judging_a_tree_checks_each_runs_end_against_the_cutoff_itself(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    finished(store, "recent")
    run = store.get_run("recent")
    assert run is not None
    assert run.finished_at is not None

    verdict = judge_tree(runtime, ["recent"], settled_before=run.finished_at)

    assert isinstance(verdict, KeptTree)
    assert verdict.reason == "finished-after-cutoff"
