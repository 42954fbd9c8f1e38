"""How a command line ends: one line on stderr for every failure, the documented exit codes,
and a traceback only after ``--debug`` (``infrastructure/cli/failures.py``)."""

from __future__ import annotations

import io
from typing import Annotated

import pytest
import typer

from runledger.domain.errors import (
    CorruptEventError,
    ProjectionBuildLockedError,
    RunNotFoundError,
    StorageUnavailableError,
    WorkflowError,
)
from runledger.infrastructure.cli.failures import (
    EXIT_DIFFERENCE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    run_command_line,
)

PASSWORD = "s3cret-Pa55"


def make_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True)

    @app.callback()
    def top(debug: Annotated[bool, typer.Option("--debug")] = False) -> None:
        """A command line to end in every way."""

    @app.command()
    def fine() -> None:
        print("done")

    @app.command()
    def rejected() -> None:
        raise RunNotFoundError("run-9")

    @app.command()
    def corrupt() -> None:
        raise CorruptEventError("not JSON", wire_name="run.created", aggregate_id="a", version=1)

    @app.command()
    def unreachable() -> None:
        raise StorageUnavailableError(cause="refused", endpoint="postgres@127.0.0.1:1/x")

    @app.command()
    def locked() -> None:
        raise ProjectionBuildLockedError(name="runs", holder="pid 7")

    @app.command()
    def crash() -> None:
        raise RuntimeError(f"cannot reach postgresql://postgres:{PASSWORD}@db:5432/x")

    @app.command()
    def interrupted() -> None:
        raise KeyboardInterrupt

    @app.command()
    def differs() -> None:
        raise typer.Exit(code=EXIT_DIFFERENCE)

    @app.command()
    def port(number: Annotated[int, typer.Option("--number", max=65535)] = 1) -> None:
        print(number)

    return app


def run(*argv: str) -> tuple[int, str, str]:
    err = io.StringIO()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", out)
        code = run_command_line(make_app(), list(argv), stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_command_that_succeeds_exits_zero_and_prints_nothing_on_stderr() -> None:
    assert run("fine") == (EXIT_OK, "done\n", "")


def test_a_workflow_error_is_one_line_with_its_code_and_exit_two() -> None:
    code, _, err = run("rejected")
    assert (code, err) == (EXIT_USAGE, "error [run.not-found]: Workflow run not found: run-9\n")


def test_a_corrupt_event_is_a_found_difference() -> None:
    code, _, err = run("corrupt")
    assert code == EXIT_DIFFERENCE
    assert err.startswith("error [store.corrupt-event]: ")
    assert err.count("\n") == 1


def test_an_unreachable_store_exits_three_as_retryable() -> None:
    code, _, err = run("unreachable")
    assert code == EXIT_UNAVAILABLE
    assert err.startswith("error [store.unavailable]: ")


def test_a_retryable_refusal_exits_three_as_well() -> None:
    code, _, err = run("locked")
    assert code == EXIT_UNAVAILABLE
    assert err.startswith("error [projection.build-locked]: Projection runs is being rebuilt")


def test_an_unexpected_exception_is_one_line_that_points_to_debug_without_the_password() -> None:
    code, _, err = run("crash")
    assert code == EXIT_INTERNAL
    assert err.splitlines() == [
        "internal error: RuntimeError: cannot reach postgresql://postgres:***@db:5432/x; "
        "run again with --debug for the traceback"
    ]
    assert PASSWORD not in err


@pytest.mark.parametrize("where", ["first", "last"])
def test_debug_anywhere_on_the_line_shows_the_traceback(where: str) -> None:
    argv = ["--debug", "crash"] if where == "first" else ["crash", "--debug"]
    code, _, err = run(*argv)
    assert code == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("internal error: RuntimeError")


def test_an_interrupt_exits_130_without_a_traceback() -> None:
    code, _, err = run("interrupted")
    assert code == EXIT_INTERRUPTED
    assert "Traceback" not in err


def test_an_explicit_exit_keeps_its_code() -> None:
    assert run("differs")[0] == EXIT_DIFFERENCE


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["nope"], "error [usage]: No such command 'nope'."),
        (["fine", "--bogus"], "error [usage]: No such option: --bogus"),
        (["port", "--number", "99999"], "error [usage]: Invalid value for '--number'"),
        (["port", "--number", "x"], "error [usage]: Invalid value for '--number'"),
    ],
)
def test_a_usage_mistake_is_one_line_naming_the_help_to_read(argv: list[str], says: str) -> None:
    code, _, err = run(*argv)
    assert code == EXIT_USAGE
    assert err.startswith(says)
    assert err.count("\n") == 1
    assert err.rstrip().endswith("--help')")


def test_a_group_without_a_command_shows_its_help() -> None:
    code, out, err = run()
    assert code == EXIT_USAGE
    assert "Usage:" in out
    assert "fine" in out
    assert err == ""


def test_every_workflow_error_subclass_is_reported_by_its_own_code() -> None:
    class CustomError(WorkflowError):
        code = "custom.code"
        template = "custom {what}"

    app = typer.Typer(add_completion=False)

    @app.command()
    def only() -> None:
        raise CustomError(what="thing")

    err = io.StringIO()
    assert run_command_line(app, [], stderr=err) == EXIT_USAGE
    assert err.getvalue() == "error [custom.code]: custom thing\n"
