"""`runfold view`: serve the local web page over the ledger (`runfold.web`).

Loopback by default and open to this machine only; any other address serves only requests that
carry the workspace's access token (`.runfold/view-token`, mode 0600), as a bearer token or the
cookie a one-time login link sets.
"""

from __future__ import annotations

from typing import Annotated

import typer

from runfold.cli.common import EXIT_CODES_HELP, WorkspaceOption, out_console
from runfold.core.errors import invalid_args


def view_cmd(
    workspace: WorkspaceOption = None,
    port: Annotated[
        int,
        typer.Option("--port", "-p", help="The TCP port (0: any free port; the URL printed names it).", metavar="N"),
    ] = 8765,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="The address to listen on. Loopback (127.0.0.1, ::1, localhost) serves this machine; any "
            "other address asks every request for the access token.",
            metavar="ADDR",
        ),
    ] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open", help="Open the page in the default browser.")] = False,
) -> None:
    """Serve a web page over the workspace's ledger: the runs, every line, the request as sent at
    any seq, the window by cause, diffs, a live tail, and the actions.

    The pages are folds of the ledger, as the CLI's (`runs`, `log`, `show`, `replay`, `why`,
    `context`, `conversation`): reading pages never write, and need no lock, so the page works
    beside a running `runfold run`. A run's last page follows new lines live. Steer, cancel,
    approve and deny reach a run another process runs; fork and continue write when no other
    process holds the ledger (`runfold serve` serves these pages too, acting through itself).
    Every action needs the page's same-origin token. Ctrl-C stops the server.

    \b
    Examples:
      runfold view
      runfold view -w ./agent-ws --port 8800 --open
      runfold view --host 0.0.0.0 --port 8800
    """
    import socket

    from runfold.api import Workspace
    from runfold.web.security import Guard, access_token, is_loopback

    if not 0 <= port <= 65535:
        raise invalid_args("serve the page", f"--port {port}", "give a port in 0..65535 (0: any free port)")
    ws = Workspace.open(workspace)
    ws.close()
    if ws.read_only:
        raise invalid_args(
            "serve the page", str(ws.root), "`runfold view` serves a workspace; `runfold init` one or give -w DIR"
        )
    guard = Guard(hosts=frozenset({"127.0.0.1", "localhost", "::1", host.strip("[]").lower()}))
    if not is_loopback(host):
        import secrets

        guard = Guard(token=access_token(ws.root), login_code=secrets.token_urlsafe(16))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise invalid_args(
            f"listen on {host}:{port} ({exc.strerror or exc})",
            str(ws.root),
            "pick another port with --port N (0 picks a free one), or stop what listens there",
        ) from None
    sock.listen(128)  # a client that connects as soon as the URL is printed waits, never is refused
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    con = out_console()
    con.print(f"runfold view: serving {ws.root} at {url}", markup=False, highlight=False)
    if guard.token is not None:
        con.print(
            f"not loopback: every request needs the access token. One-time login link: "
            f"{url}login?code={guard.login_code}  (or send `Authorization: Bearer` + the token in "
            f"{ws.root / '.runfold' / 'view-token'})",
            markup=False,
            highlight=False,
        )
    con.print("Ctrl-C stops it.", markup=False, highlight=False)
    import sys

    sys.stdout.flush()
    _serve(ws.root, guard, sock, url if open_browser else None)


def _serve(root: object, guard: object, sock: object, open_url: str | None) -> None:
    import socket
    import threading
    import webbrowser
    from pathlib import Path

    import uvicorn

    from runfold.web import create_app
    from runfold.web.security import Guard

    assert isinstance(root, Path) and isinstance(guard, Guard) and isinstance(sock, socket.socket)
    app = create_app(root, guard=guard)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    if open_url is not None:
        threading.Timer(0.5, webbrowser.open, args=(open_url,)).start()
    server.run(sockets=[sock])


def register(app: typer.Typer) -> None:
    """Add `view` to `app`."""
    app.command("view", epilog=EXIT_CODES_HELP)(view_cmd)
