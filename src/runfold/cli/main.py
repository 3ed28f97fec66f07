"""Entry point of the `runfold` command: builds the typer app from the verb-group modules.

Each verb group lives in its own module exposing `register(app)`; `_register()` lists them.
Errors and exit codes are handled once, in `RunfoldGroup` (see `runfold.cli.common`).
"""

from __future__ import annotations

from typing import Annotated

import typer
from typer.core import TyperCommand

from runfold import __version__
from runfold.cli import common
from runfold.cli.common import EXIT_CODES_HELP, RunfoldCommand, RunfoldGroup, set_debug

app = typer.Typer(
    name="runfold",
    cls=RunfoldGroup,
    help=(
        "runfold: agent runs whose only history is one append-only, hash-chained ledger.\n\n"
        "Start with `runfold init`, then `runfold run TASK`, `runfold verify`, `runfold log`, "
        "`runfold replay`. "
        "Every command takes --help with an example."
    ),
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"runfold {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show Python tracebacks instead of one error line.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_version, is_eager=True),
    ] = False,
) -> None:
    set_debug(ctx, debug)


_registered = False


def _register() -> None:
    # Each verb group module exposes `register(app)`; add one import + one call per group.
    global _registered
    if _registered:
        return
    _registered = True
    from runfold.cli import ledger_cmds

    ledger_cmds.register(app)
    from runfold.cli import tail_cmds

    tail_cmds.register(app)
    from runfold.cli import validate_cmds

    validate_cmds.register(app)
    from runfold.cli import fold_cmds

    fold_cmds.register(app)
    from runfold.cli import run_cmds

    run_cmds.register(app)
    from runfold.cli import resume_cmds

    resume_cmds.register(app)
    from runfold.cli import control_cmds

    control_cmds.register(app)
    from runfold.cli import import_cmds

    import_cmds.register(app)
    from runfold.cli import chat_cmds

    chat_cmds.register(app)
    from runfold.cli import serve_cmds

    serve_cmds.register(app)
    from runfold.cli import store_cmds

    store_cmds.register(app)
    from runfold.cli import view_cmds

    view_cmds.register(app)
    from runfold.cli import mcp_cmds

    mcp_cmds.register(app)
    from runfold.cli import batch_cmds

    batch_cmds.register(app)
    for info in app.registered_commands:  # one usage-line style for every verb
        if info.cls in (None, TyperCommand):
            info.cls = RunfoldCommand


def main() -> None:
    """Console-script entry point."""
    _register()

    common.OWN_PROCESS = True  # the process ends with the command (see cli.foreground)
    app()


_register()
