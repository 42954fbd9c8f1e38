"""Every error names the fields of its message, and a limit's message quotes its constant."""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable

import pytest

from runledger.domain import errors
from runledger.domain.effects import MAX_LABEL_LENGTH, check_label
from runledger.domain.errors import WorkflowError
from runledger.domain.follow_ups import (
    MAX_PROMPT_BYTES,
    MAX_REQUEST_ID_LENGTH,
    MAX_SOURCE_LENGTH,
    check_prompt,
    check_request_id,
    check_source,
)
from runledger.domain.human_decisions import (
    MAX_IDENTIFIER_LENGTH,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    check_identifier,
    check_json_value,
)
from runledger.domain.leases import MAX_LEASE_MS, check_lease_ms
from runledger.domain.values import RESTART_LIMIT

DERIVED: dict[type[WorkflowError], tuple[set[str], set[str]]] = {
    # (parameters, fields): the message is worded from the parameters, not quoting them.
    errors.CorruptEventError: (
        {"reason", "wire_name", "aggregate_id", "version", "position"},
        {"where", "reason"},
    ),
    errors.ReadModelsBehindError: ({"error"}, {"cause"}),
    # Kept as an attribute for the CLI's exit code, not part of the message.
    errors.RebuildFailedError: ({"reasons", "corrupt"}, {"reasons"}),
    # Where the bundle went, for ``runledger audit`` of a pruned run: not in the message.
    errors.RunArchivedError: (
        {"run_id", "archived_at", "bundle_sha256", "bundle"},
        {"run_id", "archived_at", "bundle_sha256"},
    ),
}
"""Errors whose ``__init__`` takes other values than its message's fields."""

LIMIT_PARAMETERS = {"limit", "values", "text_bytes", "depth", "size"}


def error_classes() -> list[type[WorkflowError]]:
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type)
        and issubclass(value, WorkflowError)
        and value.__module__ == errors.__name__
        # A private base only shares an __init__; its subclasses bring the templates.
        and not value.__name__.startswith("_")
    ]


def fields_of(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def parameters_of(cls: type[WorkflowError]) -> list[inspect.Parameter]:
    return list(inspect.signature(cls.__init__).parameters.values())[1:]


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_a_template_names_every_field(cls: type[WorkflowError]) -> None:
    fields = fields_of(cls.template)

    assert all(name.isidentifier() for name in fields), fields


@pytest.mark.parametrize(
    "cls",
    [cls for cls in error_classes() if cls is not WorkflowError],
    ids=lambda cls: cls.__name__,
)
def test_an_errors_init_takes_exactly_the_fields_of_its_template(cls: type[WorkflowError]) -> None:
    fields = set(fields_of(cls.template))
    parameters = parameters_of(cls)
    if not fields:
        # Inherited from WorkflowError, called with nothing.
        assert all(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        return
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters)
    assert all(p.annotation is not inspect.Parameter.empty for p in parameters)
    names = {p.name for p in parameters}
    expected_names, expected_fields = DERIVED.get(cls, (fields, fields))
    assert (names, fields) == (expected_names, expected_fields)


@pytest.mark.parametrize(
    "cls",
    [cls for cls in error_classes() if LIMIT_PARAMETERS & {p.name for p in parameters_of(cls)}],
    ids=lambda cls: cls.__name__,
)
def test_a_limits_message_holds_no_number_of_its_own(cls: type[WorkflowError]) -> None:
    assert re.search(r"(?<!UTF-)[0-9]", cls.template) is None, cls.template


def raised(check: Callable[[], object]) -> str:
    with pytest.raises(WorkflowError) as caught:
        check()
    return str(caught.value)


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (
            lambda: check_prompt("x" * (MAX_PROMPT_BYTES + 1)),
            f"Workflow follow-up prompt cannot exceed {MAX_PROMPT_BYTES} bytes",
        ),
        (
            lambda: check_source("x" * (MAX_SOURCE_LENGTH + 1)),
            "Workflow change source must be a non-empty string of at most "
            f"{MAX_SOURCE_LENGTH} characters",
        ),
        (
            lambda: check_request_id("x" * (MAX_REQUEST_ID_LENGTH + 1)),
            "Workflow request ID must be a stable identifier of at most "
            f"{MAX_REQUEST_ID_LENGTH} characters",
        ),
        (
            lambda: check_label("type", "x" * (MAX_LABEL_LENGTH + 1)),
            f"Managed effect type must be nonempty text of at most {MAX_LABEL_LENGTH} characters",
        ),
        (
            lambda: check_identifier("node_id", "x" * (MAX_IDENTIFIER_LENGTH + 1)),
            "Human decision node_id must be a non-empty string of at most "
            f"{MAX_IDENTIFIER_LENGTH} characters",
        ),
        (
            lambda: check_json_value("request", {"x": "x" * MAX_JSON_BYTES}),
            "Human decision request must be plain JSON: valid UTF-8 text, at most "
            f"{MAX_JSON_DEPTH} levels deep and {MAX_JSON_BYTES} bytes",
        ),
        (
            lambda: check_lease_ms(MAX_LEASE_MS + 1),
            f"Lease duration must be at most {MAX_LEASE_MS} milliseconds",
        ),
    ],
    ids=["prompt", "source", "request-id", "effect-label", "decision-id", "decision-json", "lease"],
)
def test_a_limits_message_quotes_the_constant_the_check_uses(
    check: Callable[[], object], message: str
) -> None:
    assert raised(check) == message


def test_the_restart_limit_message_quotes_the_limit() -> None:
    assert (
        str(errors.RestartLimitError(limit=RESTART_LIMIT))
        == f"Workflow restart limit reached ({RESTART_LIMIT} restarts)"
    )


def test_a_projection_version_error_names_the_projection_once_and_quotes_it_twice() -> None:
    error = errors.ProjectionVersionError("runs", stored_version=1, code_version=2)

    assert str(error) == (
        "Projection runs is at version 1 in the store, this code reads version 2: "
        "run `runledger projections rebuild runs` with the code of the version wanted"
    )


def test_an_archived_run_is_a_run_not_found_that_names_its_bundle_and_time() -> None:
    error = errors.RunArchivedError("run-1", "2026-02-01T00:00:00+00:00", "ab" * 32)

    assert isinstance(error, errors.RunNotFoundError)
    assert error.code == "run.archived"
    assert str(error) == (
        "Workflow run run-1 was archived at 2026-02-01T00:00:00+00:00 to a bundle with "
        f"SHA-256 {'ab' * 32}"
    )
