"""The command reference, generated from the commands themselves: the README's table of commands
and `docs/cli.md` (every command's `--help`, verbatim), so the documentation lists exactly the
commands and options that exist.

Both files hold `cog` blocks that call `summary_table()` and `reference()`; after adding or
changing a command, regenerate them with
`cog -r src/runfold/cli/main.py && cog -r README.md docs/cli.md` (the first writes the verb table
`runfold --help` lists, which the second reads; the test suite runs `cog --check` on all three
and fails while one is stale).
"""

from __future__ import annotations

import json
from typing import Any

REGENERATE = "cog -r src/runfold/cli/main.py && cog -r README.md docs/cli.md"
"""The command that regenerates the verb table, the README's table and `docs/cli.md`, in this
order (the README and `docs/cli.md` show `runfold --help`, which lists the verb table)."""

HELP_COLUMNS = 80
"""The terminal width the reference is rendered at (click wraps help text to it)."""


def _group() -> Any:
    from runfold.cli.main import command_group

    group = command_group()
    group.load_all()
    return group


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


def command_table() -> str:
    """The body of `runfold.cli.main.COMMANDS`: one `"name": ("module", "summary"),` line per
    verb, in the order the verb modules register them, each summary the first sentence of the
    verb's help (what `runfold --help` shows of it on the widest terminal).

    Raises RuntimeError for a hidden verb or a verb with its own short help: the lazy listing
    would show what the loaded command does not."""
    from runfold.cli.main import GROUP_MODULES, command_group

    group = command_group()
    lines = []
    for module_name in GROUP_MODULES:
        for name in group.load(module_name):
            command = group.get_command(None, name)
            if command.hidden or command.short_help:
                raise RuntimeError(f"runfold {name}: a hidden verb or one with short_help is not in COMMANDS")
            summary = command.get_short_help_str(limit=10**6)
            quoted = [json.dumps(text, ensure_ascii=False) for text in (name, module_name, summary)]
            lines.append("    {}: ({}, {}),\n".format(*quoted))
    return "".join(lines)


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
