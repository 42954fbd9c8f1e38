"""The ``runledger`` command line: the typer ``app`` and its thin commands.

Each command hands its store to the module that does the work (``demo_story``, ``operations``,
``bench_report``), which never imports this one. A command group (``projections
status|rebuild|verify|run``) is a ``typer.Typer`` of its own, added here with
``app.add_typer(group, name="projections")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from runledger.domain.errors import CorruptEventError, ProjectionStalledError, WorkflowError
from runledger.infrastructure.cli.audit_report import audit, check_bundle
from runledger.infrastructure.cli.bench_report import print_bench, run_bench
from runledger.infrastructure.cli.demo_story import run_demo
from runledger.infrastructure.cli.operations import (
    print_rebuild,
    print_status,
    print_verify,
    rebuild,
    run_worker,
    verify,
)
from runledger.infrastructure.runtime import StoreRuntime, open_runtime, resolve_url
from runledger.infrastructure.storage.urls import redact_url
from runledger.infrastructure.store import open_store

_P = ParamSpec("_P")
_R = TypeVar("_R")

app = typer.Typer(
    name="runledger",
    help="Durable, event-sourced state for AI-agent workflow runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Store URL: sqlite:///file.db, postgresql://..., memory://. "
        "Default: $RUNLEDGER_URL, else sqlite:///runledger.db.",
        show_default=False,
    ),
]


@app.callback()
def runledger() -> None:
    """Durable, event-sourced state for AI-agent workflow runs."""
    # A callback keeps ``runledger demo`` a sub-command even while it is the only command.


def console() -> Console:
    """The console commands print to (no highlighting: ids are not numbers)."""
    return Console(highlight=False)


def reports_workflow_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Have a command report a ``WorkflowError`` on stderr and exit with code 1."""

    # A rejected input (a bad URL, an unknown projection) is the user's to fix: one line with
    # its code, never a traceback.
    @functools.wraps(command)
    def reporting(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except WorkflowError as error:
            line = Text.assemble(("error ", "bold red"), (f"[{error.code}] ", "dim"), error.message)
            Console(stderr=True, highlight=False).print(line)
            raise typer.Exit(code=1) from error

    return reporting


@app.command()
@reports_workflow_errors
def demo(url: UrlOption = None) -> None:
    """Play a realistic scenario through every command and print one run's event log."""
    out = console()
    resolved = resolve_url(url)
    with open_store(resolved) as store:
        run_demo(store, out, url=redact_url(resolved))


projections_app = typer.Typer(
    help="Inspect, rebuild and follow the read models.", no_args_is_help=True
)
app.add_typer(projections_app, name="projections")


@projections_app.command("status")
@reports_workflow_errors
def projections_status(
    url: UrlOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Each projection's name, version, position, lag behind the log and last error."""
    with open_runtime(resolve_url(url), embedded_projections=False) as runtime:
        print_status(runtime, console(), as_json=as_json)


def _check_choice(name: str | None, all_: bool) -> None:
    # Before the store opens: a usage error must not wait for a database.
    if (name is None) == (not all_):
        raise typer.BadParameter("name one projection, or pass --all")


def _chosen(runtime: StoreRuntime, name: str | None, all_: bool) -> list[str]:
    names = runtime.projection_names() if all_ else [name or ""]
    for chosen in names:
        runtime.projector.runner(chosen)
    return names


NameArgument = Annotated[str | None, typer.Argument(help="Projection to work on.")]
AllOption = Annotated[bool, typer.Option("--all", help="Every projection.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object, no progress.")]


@projections_app.command("rebuild")
@reports_workflow_errors
def projections_rebuild(
    name: NameArgument = None,
    all_: AllOption = False,
    url: UrlOption = None,
    drop_old: Annotated[
        bool, typer.Option("--drop-old", help="Drop the old version's tables after the switch.")
    ] = False,
    accept: Annotated[
        bool,
        typer.Option(
            "--accept", help="Switch even though the rebuilt rows differ (a new version)."
        ),
    ] = False,
    restart: Annotated[
        bool, typer.Option("--restart", help="Start an unfinished build afresh, not resume it.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Build a projection beside the live one, compare, and switch to it (blue/green).

    Exit code 1 when a rebuilt projection differs and was not switched (see --accept).
    """
    _check_choice(name, all_)
    with open_runtime(resolve_url(url), embedded_projections=False) as runtime:
        names = _chosen(runtime, name, all_)
        outcomes, seconds = rebuild(
            runtime,
            names,
            Console(stderr=True),
            accept=accept,
            drop_old=drop_old,
            restart=restart,
            quiet=as_json,
        )
        print_rebuild(outcomes, seconds, console(), as_json=as_json)
    if not all(outcome.switched for outcome in outcomes):
        raise typer.Exit(code=1)


@projections_app.command("verify")
@reports_workflow_errors
def projections_verify(
    name: NameArgument = None,
    all_: AllOption = False,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay a projection from the log and compare it with the live one at its position.

    Exit code 0 when equal, 1 with the first differing rows when not.
    """
    _check_choice(name, all_)
    with open_runtime(resolve_url(url), embedded_projections=False) as runtime:
        outcomes = verify(
            runtime, _chosen(runtime, name, all_), Console(stderr=True), quiet=as_json
        )
        print_verify(outcomes, console(), as_json=as_json)
    if not all(outcome.equal for outcome in outcomes):
        raise typer.Exit(code=1)


@projections_app.command("run")
@reports_workflow_errors
def projections_run(
    url: UrlOption = None,
    poll: Annotated[
        float, typer.Option("--poll", help="Seconds between polls (a safety net on PostgreSQL).")
    ] = 0.5,
) -> None:
    """Follow the log and keep every projection current until SIGINT or SIGTERM."""
    with open_runtime(resolve_url(url), embedded_projections=False) as runtime:
        run_worker(runtime, console(), poll_seconds=poll)


class _AuditGroup(TyperGroup):
    """``audit RUN_ID ...`` runs the ``run`` command; ``audit verify-bundle FILE`` its own.

    Any first word that is not a sub-command's name is a run id (a run called
    ``verify-bundle`` is audited with ``runledger audit run verify-bundle``).
    """

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


audit_app = typer.Typer(
    cls=_AuditGroup,
    help="Audit a run: its timeline, --verify, --export; verify-bundle checks an export offline."
    " Exit codes: 0 ok, 1 a verification found a difference, 2 bad usage or input.",
    no_args_is_help=True,
)
app.add_typer(audit_app, name="audit")


def audit_exit_codes(command: Callable[_P, bool]) -> Callable[_P, None]:
    """Exit 1 when the audit found a difference (a corrupt event, a stalled model), else 2."""

    @functools.wraps(command)
    def reporting(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            intact = command(*args, **kwargs)
        except WorkflowError as error:
            line = Text.assemble(("error ", "bold red"), (f"[{error.code}] ", "dim"), error.message)
            Console(stderr=True, highlight=False).print(line)
            # A corrupt stored event or a stalled read model is what an audit looks for.
            found = isinstance(error, CorruptEventError | ProjectionStalledError)
            raise typer.Exit(code=1 if found else 2) from error
        if not intact:
            raise typer.Exit(code=1)

    return reporting


@audit_app.command("run")
@audit_exit_codes
def audit_run(
    run_id: Annotated[str, typer.Argument(help="The run to audit.")],
    url: UrlOption = None,
    lineage: Annotated[
        bool, typer.Option("--lineage", help="Include the run's ancestors and descendants.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    as_of: Annotated[
        int | None, typer.Option("--as-of", help="The timeline up to this log position.")
    ] = None,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Replay and re-project the run, compare the read models."),
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option("--export", help="Write the run's audit bundle (JSON lines) to FILE."),
    ] = None,
) -> bool:
    """The run's timeline; with --verify or --export, those instead."""
    if as_of is not None and (verify or export is not None):
        raise typer.BadParameter("--as-of applies to the timeline, not to --verify or --export")
    with open_store(resolve_url(url)) as store:
        return audit(
            store,
            run_id,
            console(),
            Console(stderr=True),
            lineage=lineage,
            as_of=as_of,
            verify=verify,
            export=export,
            as_json=as_json,
        )


@audit_app.command("verify-bundle")
@audit_exit_codes
def audit_verify_bundle(
    file: Annotated[Path, typer.Argument(help="The bundle written by audit --export.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> bool:
    """Check an audit bundle with no database: chains, order, and re-projected digests."""
    return check_bundle(file, console(), as_json=as_json)


@app.command()
@reports_workflow_errors
def bench(
    url: UrlOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    events: Annotated[
        int, typer.Option("--events", help="Size of the generated history for P3.")
    ] = 200_000,
    seconds: Annotated[
        float, typer.Option("--seconds", help="Duration of each throughput measurement.")
    ] = 5.0,
    only: Annotated[
        str, typer.Option("--only", help="Comma-separated measurements to run, e.g. P3,P4.")
    ] = "",
    quick: Annotated[
        bool, typer.Option("--quick", help="Small fixed workloads: a smoke run, not a measure.")
    ] = False,
) -> None:
    """Measure P1-P8 next to raw baselines on the URL's backend, in scratch databases."""
    chosen = [item.strip() for item in only.split(",") if item.strip()]
    results = run_bench(resolve_url(url), events=events, seconds=seconds, only=chosen, quick=quick)
    print_bench(results, console(), as_json=as_json)


@app.command()
@reports_workflow_errors
def serve(
    url: UrlOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    public_reads: Annotated[
        bool, typer.Option("--public-reads", help="Let reads go without the token.")
    ] = False,
) -> None:
    """Serve the store's JSON API, live viewer deltas and the viewer page over HTTP."""
    # Imported here: starting the other commands should not load the web stack.
    import os

    from runledger.infrastructure.serve.server import CannotListenError, ServeOptions
    from runledger.infrastructure.serve.server import serve as run_server

    options = ServeOptions(url=url, host=host, port=port, public_reads=public_reads)
    try:
        run_server(options, lambda line: print(line, flush=True), os.environ)
    except CannotListenError as error:
        Console(stderr=True, highlight=False).print(
            Text.assemble(("error ", "bold red"), str(error))
        )
        raise typer.Exit(code=2) from error


def main() -> None:
    """The console script ``runledger``."""
    app()
