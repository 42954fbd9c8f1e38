"""The ``runledger`` command line: the typer ``app`` and its thin commands.

Each command hands its store to the module that does the work (``demo_story``, ``operations``,
``runs_report``, ``bench.report``), which never imports this one. A command group
(``projections status|rebuild|verify|run``) is a ``typer.Typer`` of its own, added here with
``app.add_typer(group, name="projections")``. How a command ends (its exit code, and one line
on stderr for any failure) is ``failures``'s: no command handles errors itself.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Final, NoReturn

import typer
from rich.console import Console
from typer.core import TyperGroup

from runledger.domain.values import RunStatus
from runledger.infrastructure.cli.audit_report import audit, check_bundle
from runledger.infrastructure.cli.compaction import compact_store, print_compaction
from runledger.infrastructure.cli.demo_story import run_demo
from runledger.infrastructure.cli.failures import EXIT_DIFFERENCE, run_command_line
from runledger.infrastructure.cli.operations import (
    print_rebuild,
    print_status,
    print_verify,
    rebuild,
    run_worker,
    verify,
)
from runledger.infrastructure.cli.prune_report import (
    parse_cutoff,
    print_prune,
    print_restore,
    prune,
)
from runledger.infrastructure.cli.runs_report import print_run, print_runs
from runledger.infrastructure.exporters import start_observability
from runledger.infrastructure.runtime import (
    StoreRuntime,
    default_projections,
    open_runtime,
    resolve_url,
)
from runledger.infrastructure.storage.urls import redact_url
from runledger.infrastructure.store import open_store

PROJECTION_NAMES: Final = tuple(projection.name for projection in default_projections())
EXIT_CODES: Final = (
    "Exit codes: 0 ok, 1 a verification found a difference, 2 bad usage or input, "
    "3 the store cannot serve it now (retry later), 70 an internal error."
)


def _typer(help_text: str, **options: object) -> typer.Typer:
    # Plain click help: it stays readable in a narrow terminal and shows flags as flags.
    return typer.Typer(
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        **options,  # type: ignore[arg-type]
    )


app = _typer(f"Durable, event-sourced state for AI-agent workflow runs. {EXIT_CODES}")

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Store URL: sqlite:///file.db, postgresql://..., memory://. "
        "Default: $RUNLEDGER_URL, else sqlite:///runledger.db.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


LogFormatOption = Annotated[
    str,
    typer.Option("--log-format", help="Log lines on stderr: text, or json (one object a line)."),
]
OtlpOption = Annotated[
    str | None,
    typer.Option(
        "--otlp-endpoint",
        help="Export traces and metrics by OTLP/HTTP, e.g. http://127.0.0.1:4318 "
        "(needs runledger[otel]).",
        show_default=False,
    ),
]


@app.callback()
def runledger(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of an internal error.")
    ] = False,
) -> None:
    """Durable, event-sourced state for AI-agent workflow runs."""
    # A callback keeps ``runledger demo`` a sub-command; --debug is read by failures.


def console() -> Console:
    """The console commands print to (no highlighting: ids are not numbers)."""
    return Console(highlight=False)


@app.command()
def demo(url: UrlOption = None) -> None:
    """Play a realistic scenario through every command and print one run's event log."""
    out = console()
    resolved = resolve_url(url)
    with open_store(resolved) as store:
        run_demo(store, out, url=redact_url(resolved))


@app.command()
def compact(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Give a SQLite store's free pages back to the disk (VACUUM); PostgreSQL's autovacuum
    does this by itself."""
    resolved = resolve_url(url)
    # Opened first so a missing or foreign store is refused as every read-only command does.
    with open_runtime(resolved, embedded_projections=False, create=False) as runtime:
        backend = runtime.backend
    print_compaction(compact_store(resolved, backend), console(), as_json=as_json)


@app.command("prune")
def prune_command(
    settled_before: Annotated[
        str,
        typer.Option(
            "--settled-before",
            help="Prune trees whose runs all ended before this: 30d (days ago), or an ISO "
            "date or datetime (UTC unless it names a zone).",
            show_default=False,
        ),
    ],
    archive: Annotated[
        Path,
        typer.Option(
            "--archive", help="Existing folder the trees' bundles go to.", show_default=False
        ),
    ],
    url: UrlOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say which trees would go, and why not.")
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Prune at most this many trees.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Archive each settled run tree to a verified bundle, then prune it from the store."""
    with open_runtime(resolve_url(url), create=False) as runtime:
        cutoff = parse_cutoff(settled_before, datetime.now(UTC))
        report = prune(
            runtime,
            Console(stderr=True),
            settled_before=cutoff,
            archive=archive,
            limit=limit,
            dry_run=dry_run,
            quiet=as_json,
        )
    print_prune(report, console(), as_json=as_json)


@app.command("restore")
def restore_command(
    # Text, not a ``Path``: that would make an empty argument the current folder, which the
    # refusal would then name instead of the empty path given.
    bundle: Annotated[str, typer.Argument(help="The bundle a prune wrote.", show_default=False)],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Put a pruned run tree back from its bundle, once it verifies and matches the tree's
    tombstone (exit 1 if its rows then differ from the bundle's digests)."""
    with open_store(resolve_url(url), create=False) as store:
        restored = store.restore_runs(bundle)
    print_restore(restored, console(), as_json=as_json)


runs_app = _typer("Find runs and look at one.")
app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def runs_list(
    url: UrlOption = None,
    status: Annotated[
        RunStatus | None, typer.Option("--status", help="Only runs with this status.")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Only runs of this origin session.")
    ] = None,
    root: Annotated[
        str | None, typer.Option("--root", help="Only the runs of this root run's tree.")
    ] = None,
    after: Annotated[
        str | None, typer.Option("--after", help="The page after this run (keyset paging).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Runs on the page.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Runs in creation order, one page at a time."""
    with open_store(resolve_url(url), create=False) as store:
        print_runs(
            store,
            console(),
            status=status,
            session_id=session,
            root_run_id=root,
            after=after,
            limit=limit,
            as_json=as_json,
        )


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run to show.")],
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """One run: its record, lineage, follow-up queue and terminal data."""
    with open_store(resolve_url(url), create=False) as store:
        print_run(store, console(), run_id, as_json=as_json)


projections_app = _typer("Inspect, rebuild and follow the read models.")
app.add_typer(projections_app, name="projections")


@projections_app.command("status")
def projections_status(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Each projection's name, version, position, lag behind the log and last error."""
    with open_runtime(resolve_url(url), embedded_projections=False, create=False) as runtime:
        print_status(runtime, console(), as_json=as_json)


def _check_choice(name: str | None, all_: bool) -> None:
    # Before the store opens: a usage error must not wait for a database.
    if name is not None and all_:
        raise typer.BadParameter("give one projection name or --all, not both")
    if name is None and not all_:
        raise typer.BadParameter(
            "name a projection (" + ", ".join(PROJECTION_NAMES) + ") or pass --all"
        )


def _chosen(runtime: StoreRuntime, name: str | None, all_: bool) -> list[str]:
    names = runtime.projection_names() if all_ else [name or ""]
    for chosen in names:
        runtime.projector.runner(chosen)
    return names


NameArgument = Annotated[
    str | None,
    typer.Argument(
        help="Projection to work on: " + ", ".join(PROJECTION_NAMES) + ".", show_default=False
    ),
]
AllOption = Annotated[bool, typer.Option("--all", help="Every projection.")]


@projections_app.command("rebuild")
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
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            min=1,
            help="Processes to split the projections over (default: half the cores).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Build a projection beside the live one, compare, and switch to it (blue/green).

    Exit code 1 when a rebuilt projection differs and was not switched (see --accept).
    """
    _check_choice(name, all_)
    with open_runtime(resolve_url(url), embedded_projections=False, create=False) as runtime:
        names = _chosen(runtime, name, all_)
        outcomes, seconds = rebuild(
            runtime,
            names,
            Console(stderr=True),
            accept=accept,
            drop_old=drop_old,
            restart=restart,
            quiet=as_json,
            processes=processes,
        )
        print_rebuild(outcomes, seconds, console(), as_json=as_json)
    if not all(outcome.switched for outcome in outcomes):
        raise typer.Exit(code=EXIT_DIFFERENCE)


@projections_app.command("verify")
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
    with open_runtime(resolve_url(url), embedded_projections=False, create=False) as runtime:
        outcomes = verify(
            runtime, _chosen(runtime, name, all_), Console(stderr=True), quiet=as_json
        )
        print_verify(outcomes, console(), as_json=as_json)
    if not all(outcome.equal for outcome in outcomes):
        raise typer.Exit(code=EXIT_DIFFERENCE)


@projections_app.command("run")
def projections_run(
    url: UrlOption = None,
    poll: Annotated[
        float,
        typer.Option(
            "--poll", min=0.01, help="Seconds between polls (a safety net on PostgreSQL)."
        ),
    ] = 0.5,
    log_format: LogFormatOption = "text",
    otlp_endpoint: OtlpOption = None,
) -> None:
    """Follow the log and keep every projection current until SIGINT or SIGTERM."""
    exporters = start_observability(log_format, otlp_endpoint)
    try:
        with open_runtime(resolve_url(url), embedded_projections=False) as runtime:
            run_worker(runtime, console(), poll_seconds=poll)
    finally:
        exporters.shutdown()


class _AuditGroup(TyperGroup):
    """``audit RUN_ID ...`` runs the ``run`` command; ``audit verify-bundle FILE`` its own.

    Any first word that is not a sub-command's name is a run id (a run called
    ``verify-bundle`` is audited with ``runledger audit run verify-bundle``).
    """

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


audit_app = _typer(
    "Audit a run: its timeline, --verify, --export; verify-bundle checks an export offline. "
    + EXIT_CODES,
    cls=_AuditGroup,
)
app.add_typer(audit_app, name="audit")


@audit_app.command("run")
def audit_run(
    run_id: Annotated[str, typer.Argument(help="The run to audit.")],
    url: UrlOption = None,
    lineage: Annotated[
        bool, typer.Option("--lineage", help="Include the run's ancestors and descendants.")
    ] = False,
    as_json: JsonOption = False,
    as_of: Annotated[
        int | None,
        typer.Option("--as-of", min=0, help="The timeline up to this log position."),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Replay and re-project the run, compare the read models."),
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export", help="Write the run's audit bundle (JSON lines) to FILE.", dir_okay=False
        ),
    ] = None,
) -> None:
    """The run's timeline; with --verify or --export, those instead."""
    if as_of is not None and (verify or export is not None):
        raise typer.BadParameter("--as-of applies to the timeline, not to --verify or --export")
    with open_store(resolve_url(url), create=False) as store:
        intact = audit(
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
    if not intact:
        raise typer.Exit(code=EXIT_DIFFERENCE)


@audit_app.command("verify-bundle")
def audit_verify_bundle(
    file: Annotated[
        Path,
        typer.Argument(help="The bundle written by audit --export.", exists=True, dir_okay=False),
    ],
    as_json: JsonOption = False,
) -> None:
    """Check an audit bundle with no database: chains, order, and re-projected digests."""
    if not check_bundle(file, console(), as_json=as_json):
        raise typer.Exit(code=EXIT_DIFFERENCE)


def _bench_rows(text: str, row_ids: Sequence[str]) -> list[str]:
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    known = {row.upper(): row for row in row_ids}
    unknown = [item for item in chosen if item.upper() not in known]
    if unknown:
        raise typer.BadParameter(
            f"unknown row {', '.join(unknown)}; the rows are {', '.join(row_ids)}",
            param_hint="'--only'",
        )
    return chosen


@app.command()
def bench(
    url: UrlOption = None,
    as_json: JsonOption = False,
    events: Annotated[
        int | None,
        typer.Option(
            "--events",
            min=1,
            help="Size of the generated history of P3, P7 and P13 (default 50,000; "
            "3,000 with --quick; 200,000 with --full).",
        ),
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option(
            "--seconds",
            min=0.1,
            help="Duration of each throughput measurement, split into turns with its "
            "baselines (default 2; 0.5 with --quick; 5 with --full).",
        ),
    ] = None,
    only: Annotated[
        str,
        typer.Option(
            "--only", help="Comma-separated rows to run, e.g. P3,P4 (default: every row)."
        ),
    ] = "",
    quick: Annotated[
        bool, typer.Option("--quick", help="Small fixed workloads: a smoke run, not a measure.")
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Full-size workloads: the 1M-event V3, 100k-event histories, longer turns.",
        ),
    ] = False,
) -> None:
    """Measure the rows next to their baselines on the URL's backend, in scratch databases.

    The rows: see the README's Performance section.
    """
    # Imported here: the bench's rows (and their HTTP client) are not every command's to load.
    from runledger.infrastructure.cli.bench.report import ROW_IDS, print_bench, run_bench

    chosen = _bench_rows(only, ROW_IDS)
    if quick and full:
        raise typer.BadParameter("--quick and --full exclude each other", param_hint="'--full'")
    outcome = run_bench(
        resolve_url(url),
        events=events or (200_000 if full else 3_000 if quick else 50_000),
        seconds=seconds or (5.0 if full else 0.5 if quick else 2.0),
        only=chosen,
        quick=quick,
        full=full,
    )
    print_bench(outcome, console(), as_json=as_json)


@app.command()
def serve(
    url: UrlOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free).")
    ] = 8765,
    public_reads: Annotated[
        bool, typer.Option("--public-reads", help="Let reads go without the token.")
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A host name (or name:port) requests may use besides the bound address; "
            "repeatable. Also $RUNLEDGER_SERVE_ALLOWED_HOSTS, comma separated.",
        ),
    ] = None,
    metrics: Annotated[
        bool,
        typer.Option("--metrics", help="Serve Prometheus /metrics (needs runledger[otel])."),
    ] = False,
    public_metrics: Annotated[
        bool, typer.Option("--public-metrics", help="With --metrics: no token for /metrics.")
    ] = False,
    log_format: LogFormatOption = "text",
    otlp_endpoint: OtlpOption = None,
) -> None:
    """Serve the store's JSON API, live viewer deltas and the viewer page over HTTP."""
    # Imported here: starting the other commands should not load the web stack.
    import os

    from runledger.infrastructure.serve.probes import MetricsEndpoint
    from runledger.infrastructure.serve.server import CannotServeError, ServeOptions
    from runledger.infrastructure.serve.server import serve as run_server

    if public_metrics and not metrics:
        raise typer.BadParameter("--public-metrics applies to --metrics")
    exporters = start_observability(log_format, otlp_endpoint, prometheus=metrics)
    endpoint = None
    if exporters.prometheus is not None:
        endpoint = MetricsEndpoint(exporters.prometheus, exporters.content_type, public_metrics)
    options = ServeOptions(
        url=url,
        host=host,
        port=port,
        public_reads=public_reads,
        allowed_hosts=tuple(allowed_host or ()),
        metrics=endpoint,
    )
    try:
        run_server(options, lambda line: print(line, flush=True), os.environ)
    except CannotServeError as error:
        raise typer.BadParameter(str(error)) from error
    finally:
        exporters.shutdown()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console script ``runledger``."""
    # SIGTERM (``timeout``, a service manager, ``kill``) stops a command as Ctrl-C does, so
    # its cleanup runs: a bench's scratch databases, a rebuild's scratch copies. ``serve``
    # and ``projections run`` put their own handler in place while they run.
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(run_command_line(app, sys.argv[1:] if argv is None else argv))


__all__: Sequence[str] = ["app", "main"]
