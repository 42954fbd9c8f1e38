"""Text and JSON a store accepts come back byte for byte, from the run and the read models."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore
from tests.property.strategies import clean_texts

json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | clean_texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(clean_texts, inner, max_size=3),
    max_leaves=10,
)
prompts = clean_texts.filter(str.strip)


def test_accepted_text_and_json_read_back_unchanged(store: WorkflowStore) -> None:
    numbers = itertools.count(1)

    @settings(max_examples=settings().max_examples)
    @given(title=clean_texts, input=json_like, prompt=prompts)
    def check(title: str, input: Any, prompt: str) -> None:
        run_id, session_id = f"run-{next(numbers)}", "session-1"
        store.create_run(run_id, workflow_name="echo", input=input, title=title)
        store.bind_origin_session(run_id, session_id)
        store.queue_follow_up(
            run_id,
            request_id="request-1",
            target_session_id=session_id,
            actor=Actor("session", session_id),
            source="worktree",
            prompt=prompt,
        )

        run = store.get_run(run_id)
        queue = store.follow_up_queue(run_id)
        assert run is not None
        assert queue is not None
        assert (run.title, run.input) == (title, input)
        assert queue.follow_ups[0].prompt == prompt

    check()
