"""The command reference, generated from the commands themselves: the README's table of commands
and `docs/cli.md` (every command's `--help`, verbatim), so the documentation lists exactly the
commands and options that exist.

Both files hold `cog` blocks that call `summary_table()` and `reference()`; after adding or
changing a command, regenerate them with `cog -r README.md docs/cli.md` (the test suite runs
`cog --check` on both and fails while they are stale).
"""

from __future__ import annotations

from typing import Any

HELP_COLUMNS = 80
"""The terminal width the reference is rendered at (click wraps help text to it)."""


def _group() -> Any:
    import typer

    from runfold.cli.main import _register, app

    _register()
    return typer.main.get_command(app)


def command_names() -> list[str]:
    """Every `runfold` command, in the order `runfold --help` lists them."""
    group = _group()
    return [name for name in group.list_commands(None) if not group.get_command(None, name).hidden]


def help_text(*command: str) -> str:
    """What `runfold [COMMAND] --help` prints at `HELP_COLUMNS` columns, trailing spaces cut."""
    from typer.testing import CliRunner

    from runfold.cli.main import app

    result = CliRunner().invoke(
        app, [*command, "--help"], env={"COLUMNS": str(HELP_COLUMNS), "NO_COLOR": "1"}
    )
    if result.exit_code != 0:
        raise RuntimeError(f"runfold {' '.join(command)} --help exited {result.exit_code}: {result.output}")
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n") + "\n"


def summary_table() -> str:
    """The README's Markdown table: each command and the first sentence of its help."""
    group = _group()
    rows = ["| command | what it does |", "|---|---|"]
    for name in command_names():
        summary = group.get_command(None, name).get_short_help_str(limit=120).replace("|", "\\|")
        rows.append(f"| [`runfold {name}`](docs/cli.md#runfold-{name}) | {summary} |")
    return "\n".join(rows) + "\n"


def reference() -> str:
    """`docs/cli.md`'s body: `runfold --help`, then one section per command with its `--help`."""
    parts = ["## runfold\n", "```text\n" + help_text() + "```\n"]
    group = _group()
    for name in command_names():
        parts += [f"## runfold {name}\n", "```text\n" + help_text(name) + "```\n"]
        command = group.get_command(None, name)
        for sub in getattr(command, "list_commands", lambda _ctx: [])(None):  # a group's verbs
            parts += [f"## runfold {name} {sub}\n", "```text\n" + help_text(name, sub) + "```\n"]
    return "\n".join(parts)
