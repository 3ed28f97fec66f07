"""`runfold serve`: one long-running owner of the workspace hosting many runs, with an HTTP API and
the web page.

A thin shell around `runfold.server.process.run_server`; while it runs, `runfold run`,
`continue`, `fork --run`, `steer` and `cancel` in the same workspace hand their work to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runfold.cli.common import EXIT_CODES_HELP, WorkspaceOption

SERVE_EPILOG = (
    "The API lives under /api/ (OpenAPI schema at /api/openapi.json, docs at /api/docs). "
    "Ctrl-C or SIGTERM stops the server: running runs are frozen as cancelled, queued runs stay "
    "queued for the next start. A server killed outright loses nothing acknowledged: its next "
    "start freezes the runs it left (process_died) and runs the queued ones. " + EXIT_CODES_HELP
)


def serve_cmd(
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on. Anything but loopback needs a bearer token (--new-token).",
            metavar="ADDR",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="TCP port (0 picks a free one; serve.json says which).", metavar="N")
    ] = 7878,
    max_runs: Annotated[
        int,
        typer.Option("--max-runs", help="Runs that run at once; later dispatches wait, queued (a run waiting for its children's replies lends its place).", metavar="N"),
    ] = 32,
    new_token: Annotated[
        bool,
        typer.Option(
            "--new-token",
            help="Generate a fresh bearer token into .runfold/serve/token (mode 0600) and ask for it.",
        ),
    ] = False,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="Read the bearer token from FILE (mode 0600). Default: .runfold/serve/token when it exists.",
            show_default=False,
            metavar="FILE",
        ),
    ] = None,
    max_body: Annotated[
        int,
        typer.Option(
            "--max-body",
            help="Bytes a request body may hold; a longer one is answered 413 and changes nothing.",
            metavar="BYTES",
        ),
    ] = 1024 * 1024,  # runfold.server.limits.DEFAULT_MAX_BODY (not imported: --help stays light)
    workspace: WorkspaceOption = None,
) -> None:
    """Own the workspace and host many runs at once, with an HTTP API (dispatch, steer, cancel,
    fork, continue, list, read, verify, and each run's lines as Server-Sent Events).

    All runs share the one ledger writer: lines of every run in flight go out with one fsync.
    It writes .runfold/serve/serve.json (pid, URL, token file) so the CLI finds it. The web page
    of `runfold view` is served at / too; its actions (steer, cancel, fork, continue, approve,
    deny) go through this server.

    \b
    Examples:
      runfold serve --port 0 --max-runs 100
      runfold serve --host 0.0.0.0 --new-token
      curl -s localhost:7878/api/runs -d '{"task": "say hello"}' -H 'content-type: application/json'
    """
    from runfold.server.process import ServeOptions, run_server
    from runfold.store.layout import find_workspace

    root = find_workspace(workspace)
    run_server(root, ServeOptions(host, port, max_runs, token_file, new_token, max_body))


def register(app: typer.Typer) -> None:
    """Add `serve` to `app`."""
    app.command("serve", epilog=SERVE_EPILOG)(serve_cmd)


__all__ = ["register"]
