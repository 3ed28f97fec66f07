"""Entry point of the `runfold` command: the typer app, whose verbs load when they are used.

Each verb group lives in its own module exposing `register(app)`; `GROUP_MODULES` lists them and
`COMMANDS` says which module holds each verb and its one-line summary, so `runfold --help` lists
every verb and `runfold verify` imports only `ledger_cmds`, not the run loop or the server.
Errors and exit codes are handled once, in `RunfoldGroup` (see `runfold.cli.common`).
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Annotated, Any

import typer
import typer.main
from typer._click.exceptions import UsageError
from typer.core import TyperCommand

from runfold import __version__
from runfold.cli import common
from runfold.cli.common import EXIT_CODES_HELP, RunfoldCommand, RunfoldGroup, set_debug

GROUP_MODULES = (
    "ledger_cmds",
    "tail_cmds",
    "validate_cmds",
    "fold_cmds",
    "run_cmds",
    "resume_cmds",
    "control_cmds",
    "import_cmds",
    "chat_cmds",
    "serve_cmds",
    "store_cmds",
    "view_cmds",
    "batch_cmds",
    "mcp_cmds",
)
"""The verb-group modules under `runfold.cli`, each with a `register(app)`, in help order."""

COMMANDS: dict[str, tuple[str, str]] = {
    # [[[cog import cog; from runfold.cli.reference import command_table; cog.out(command_table())]]]
    "init": ("ledger_cmds", "Create a workspace: DIR/.runfold/ with a ledger whose first line is workspace_initialized."),
    "verify": ("ledger_cmds", "Check every line of a ledger: parse, version, chain, seq, canonical bytes, kind."),
    "log": ("ledger_cmds", "Show the ledger as a timeline: seq, time (UTC), run, who, kind and a one-line summary."),
    "show": ("ledger_cmds", "Show one line pretty-printed, with its hash, prev and chain position."),
    "head": ("tail_cmds", "Verify the ledger and print its head: SEQ:HASH of its newest line."),
    "repair": ("tail_cmds", "Move bytes that are not ledger lines off the end of the ledger (nothing is deleted)."),
    "validate": ("validate_cmds", "Check a provider request body and print every violation with its message index and rule."),
    "conversation": ("fold_cmds", "Show the conversation a run's fold rebuilds at a seq, with the validator's verdict."),
    "fork": ("fold_cmds", "Fork a run at a seq: a new run inheriting its conversation through the last safe cut point."),
    "runs": ("fold_cmds", "List the runs: id, status, model, turns, tokens (input+output), cost, task."),
    "tree": ("fold_cmds", "Show the runs as a tree: forks (with the seq they were cut at), delegations and successors."),
    "why": ("fold_cmds", "Explain the context window of a run at a seq: the model's window and the region budgets, the tokens of each region and of the whole request with the method that produced each figure, its size by region and by cause, then every change with the seq and cause that made it."),
    "context": ("fold_cmds", "Print the context window of a run at a seq region by region, as the model saw it: the system segments (from the frozen prefix in the content store), the tool table, the conversation message by message and block by block with the seq and cause that put each block there, and each region's tokens against its budget."),
    "run": ("run_cmds", "Run an agent on TASK in the workspace, to its end; every step is a ledger line first."),
    "replay": ("run_cmds", "Rebuild the exact body of every model request of RUN from the ledger and check its hash."),
    "cost": ("run_cmds", "Tokens and cost (micro-USD shown as dollars) by run, by model and by tool, with what the prompt cache saved."),
    "resume": ("resume_cmds", "Verify the ledger, then close what a dead process left open."),
    "continue": ("resume_cmds", "Continue a frozen run: a successor inherits its conversation and goes on."),
    "steer": ("control_cmds", "Deliver TEXT into RUN, which another `runfold` process is running."),
    "cancel": ("control_cmds", "Cancel RUN, which another `runfold` process is running."),
    "approve": ("control_cmds", "Approve CALL of RUN, which waits for approval in another `runfold` process."),
    "deny": ("control_cmds", "Deny CALL of RUN, which waits for approval in another `runfold` process."),
    "import": ("import_cmds", "Import a session another agent tool wrote: each conversation becomes a frozen run."),
    "chat": ("chat_cmds", "Talk with an agent in a room, message after message."),
    "serve": ("serve_cmds", "Own the workspace and host many runs at once, with an HTTP API (dispatch, steer, cancel, fork, continue, list, read, verify, and each run's lines as Server-Sent Events)."),
    "migrate": ("store_cmds", "Copy a ledger into another store, byte for byte: the heads match."),
    "view": ("view_cmds", "Serve a web page over the workspace's ledger: the runs, every line, the request as sent at any seq, the window by cause, diffs, a live tail, and the actions."),
    "batch": ("batch_cmds", "Run a JSONL file of tasks as runs spread over a Ray cluster, at most N at once."),
    "mcp": ("mcp_cmds", "MCP servers: the [mcp.<name>] tables of .runfold/config.toml and their tools."),
    # [[[end]]]
}
"""Each verb: the `runfold.cli` module that registers it and the summary `runfold --help` shows
(the first sentence of its help), in help order. Written by `cog -r src/runfold/cli/main.py` from
the verbs themselves (`runfold.cli.reference.command_table`); the test suite fails while it is
stale."""


class LazyGroup(RunfoldGroup):
    """The `runfold` group: a verb's module is imported, and its click command built, when the
    verb is invoked or its own help is asked for; `runfold --help` lists `COMMANDS` without
    importing any of them."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def invoke(self, ctx: Any) -> Any:
        # a verb's module loads while its name is resolved, before the root's callback runs:
        # note --debug first, so that an error loading it shows its traceback too
        set_debug(ctx, bool(ctx.params.get("debug")))
        return super().invoke(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.load(COMMANDS[cmd_name][0])
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        # typer suggests from the loaded verbs only; a lazy group suggests from every verb
        try:
            return self._click_resolve_command(ctx, args)
        except UsageError as error:
            matches = get_close_matches(args[0], list(COMMANDS)) if args else []
            if matches:
                suggestions = ", ".join(repr(name) for name in matches)
                error.message = f"{error.message.rstrip('.')}. Did you mean {suggestions}?"
            raise

    def load(self, module_name: str) -> list[str]:
        """Import `runfold.cli.<module_name>` and add the verbs its `register` makes; returns
        their names, in the order it registers them (commands, then groups). The module is
        imported by `__import__`, the import statement's own path, so `python -X importtime`
        lists it (the start-up tests read that list)."""
        verbs = typer.Typer()
        __import__(f"runfold.cli.{module_name}", fromlist=["register"]).register(verbs)
        for info in verbs.registered_commands:
            if info.cls in (None, TyperCommand):  # one usage-line style for every verb
                info.cls = RunfoldCommand
            command = typer.main.get_command_from_info(
                info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=None
            )
            self.add_command(command, info.name)
        for group in verbs.registered_groups:
            sub = typer.main.get_group_from_info(
                group,
                pretty_exceptions_short=app.pretty_exceptions_short,
                suggest_commands=app.suggest_commands,
                rich_markup_mode=None,
            )
            self.add_command(sub, group.name)
        return [str(info.name) for info in verbs.registered_commands] + [str(g.name) for g in verbs.registered_groups]

    def load_all(self) -> None:
        """Import every verb module (the command reference and its tests need every verb)."""
        for module_name in GROUP_MODULES:
            self.load(module_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        from typer._click.utils import make_default_short_help

        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = []
        for name, (_, summary) in COMMANDS.items():
            loaded = self.commands.get(name)
            rows.append(
                (name, loaded.get_short_help_str(limit) if loaded else make_default_short_help(summary, limit))
            )
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="runfold",
    cls=LazyGroup,
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


def command_group() -> LazyGroup:
    """The click group `runfold` runs, with no verb loaded yet."""
    group = typer.main.get_command(app)
    assert isinstance(group, LazyGroup)
    return group


def main() -> None:
    """Console-script entry point."""
    common.OWN_PROCESS = True  # the process ends with the command (see cli.foreground)
    app()
