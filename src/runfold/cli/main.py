"""Entry point of the `runfold` command: builds the typer app from the verb-group modules."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="runfold",
    help="runfold: agent runs whose only history is one append-only, hash-chained ledger.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Each verb group module exposes `register(app)`; add new groups here.
    from runfold.cli import ledger_cmds

    ledger_cmds.register(app)


def main() -> None:
    """Console-script entry point."""
    _register()
    app()
