"""`runfold mcp list`: the MCP servers of `.runfold/config.toml` and the tools each gives a run.

Each server is started, asked for its tools and stopped, exactly as a run would start it, so a
server that would refuse a run is shown with the same error. Built on `Workspace.mcp_servers`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from runfold.cli.common import (
    EXIT_CODES_HELP,
    JsonOption,
    WorkspaceOption,
    echo_json,
    error_object,
    out_console,
    want_json,
)


def list_cmd(
    ctx: typer.Context,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
    descriptions: Annotated[
        bool, typer.Option("--descriptions", help="Show each tool's description under its name.")
    ] = False,
) -> None:
    """Start each configured MCP server, list its tools under the names a run's tool table gives
    them (`<server>__<tool>`), and stop it. A server that does not start is shown with its
    error; the exit code is then 1.

    \b
    Examples:
      runfold mcp list
      runfold mcp list --json
    """
    from runfold.api import Workspace

    as_json = want_json(ctx, json)
    with Workspace.open(workspace) as ws:
        listings = ws.mcp_servers()
    failed = any(item.error is not None for item in listings)
    if as_json:
        rows: list[dict[str, Any]] = []
        for item in listings:
            s = item.server
            row: dict[str, Any] = {"name": s.name, "transport": s.transport, "target": s.target}
            row["tools"] = [{"name": n, "effect": e, "description": d} for n, e, d in item.tools]
            if item.error is not None:
                row["error"] = error_object(item.error)
            rows.append(row)
        echo_json({"servers": rows})
    else:
        console = out_console()
        if not listings:
            console.print(
                "no MCP servers: add a [mcp.<name>] table to .runfold/config.toml "
                '(command = "..." for stdio, url = "..." for streamable HTTP)',
                markup=False,
                highlight=False,
            )
        for item in listings:
            s = item.server
            state = f"{len(item.tools)} tool(s)" if item.error is None else "not started"
            console.print(f"{s.name}  {s.transport}  {s.target}  — {state}", markup=False, highlight=False)
            if item.error is not None:
                console.print(f"  {item.error.display()}", markup=False, highlight=False)
            for name, effect, description in item.tools:
                console.print(f"  {name}  ({effect})", markup=False, highlight=False)
                if descriptions:
                    console.print(f"      {description}", markup=False, highlight=False)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `mcp` group (`mcp list`) to `app`."""
    mcp_app = typer.Typer(
        name="mcp",
        help="MCP servers: the [mcp.<name>] tables of .runfold/config.toml and their tools.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
    )
    mcp_app.command("list", epilog=EXIT_CODES_HELP)(list_cmd)
    app.add_typer(mcp_app, name="mcp")


__all__ = ["register"]
