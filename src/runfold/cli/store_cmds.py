"""`runfold migrate`: copy a ledger into PostgreSQL or back into files, byte for byte (DESIGN.md §3).

Thin, like every verb: it parses its options, calls `Workspace.migrate`, and prints a readable
summary or, with `--json`, the report as JSON on stdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runfold.cli.common import EXIT_CODES_HELP, JsonOption, echo_json, out_console, want_json
from runfold.core.figures import count


def migrate_cmd(
    ctx: typer.Context,
    path: Annotated[
        Path | None,
        typer.Argument(
            help="The ledger to copy: a workspace, a ledger directory or a segment file starting "
            "at seq 0. Default: the workspace found from the current directory (or $RUNFOLD_WORKSPACE).",
            show_default=False,
            metavar="PATH",
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Copy into PostgreSQL: postgresql://USER@HOST/DB?workspace=NAME (needs the "
            "`postgres` extra). That workspace must hold no line.",
            show_default=False,
            metavar="URL",
        ),
    ] = None,
    to_file: Annotated[
        Path | None,
        typer.Option(
            "--to-file",
            help="Copy into files: DIR becomes a workspace whose .runfold/ledger holds the same "
            "lines (it must hold no ledger yet; created if missing).",
            show_default=False,
            metavar="DIR",
        ),
    ] = None,
    use: Annotated[
        bool,
        typer.Option(
            "--use",
            help='With --to: then point the workspace at the store (`store = "URL"` at the head of '
            "its .runfold/config.toml); its file ledger stays as a copy.",
        ),
    ] = False,
    json: JsonOption = False,
) -> None:
    """Copy a ledger into another store, byte for byte: the heads match.

    Every line is verified while it is read and written unchanged, in one transaction for
    PostgreSQL, so a failed copy leaves the target empty. A target that already holds lines is
    refused (a migration never merges histories). The source is left as it is; --use then
    switches the workspace to the store.

    \b
    Examples:
      runfold migrate --to 'postgresql://runfold@db.internal/runfold?workspace=evals' --use
      runfold migrate --to-file ./evals-files
      runfold migrate examples/sprawling-golden-p0.jsonl --to-file ./imported
    """
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    with Workspace.open(path) as ws:
        report = ws.migrate(to=to, to_file=to_file, use=use)
    if as_json:
        echo_json(
            {
                "ok": True,
                "source": report.source,
                "target": report.target,
                "lines": report.lines,
                "bytes": report.bytes,
                "head": report.head,
                "seconds": report.seconds,
                "using": use,
            }
        )
        return
    con = out_console()
    con.print(
        f"migrated {count(report.lines)} lines ({count(report.bytes)} bytes) to {report.target} "
        f"in {report.seconds:.2f} s",
        markup=False,
    )
    con.print(f"head: {report.head} (the source's)", markup=False)
    if use:
        con.print("the workspace now uses the store (its file ledger stays as a copy)", markup=False)
    elif to is not None:
        con.print(
            'to use it: rerun with --use, or put store = "URL" at the head of .runfold/config.toml',
            markup=False,
        )


def register(app: typer.Typer) -> None:
    """Add the store verbs to `app`."""
    app.command("migrate", epilog=EXIT_CODES_HELP)(migrate_cmd)
