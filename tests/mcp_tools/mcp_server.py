"""A real MCP server written with the official SDK, for the MCP client tests.

Run it as `python mcp_server.py stdio` (stdin/stdout) or `python mcp_server.py http PORT`
(streamable HTTP on 127.0.0.1:PORT at `/mcp`; with `--token T` it answers only requests that
carry `Authorization: Bearer T`). Tools: `add` (read-only), `note` (writes a line to the file
named by `MCP_NOTES`), `pid` (the server's process id) and `hang` (writes its pid to the file
named by `MCP_HANG_PID`, then sleeps: a test kills the server mid-call).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("runfold-test")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> str:
    """Add two whole numbers and say the sum."""
    return f"{a} + {b} = {a + b}"


@server.tool()
def note(text: str) -> str:
    """Append a line of text to the notes file."""
    with open(os.environ["MCP_NOTES"], "a", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"noted: {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
async def hang(seconds: int = 60) -> str:
    """Sleep for a while (a call a test interrupts)."""
    path = os.environ.get("MCP_HANG_PID")
    if path:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
    await asyncio.sleep(seconds)
    return "woke up"


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
        return
    import uvicorn
    from starlette.types import ASGIApp, Receive, Scope, Send

    port = int(sys.argv[2])
    token = sys.argv[sys.argv.index("--token") + 1] if "--token" in sys.argv else None
    app = server.streamable_http_app()

    def guarded(inner: ASGIApp) -> ASGIApp:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and token is not None:
                headers = dict(scope.get("headers") or [])
                if headers.get(b"authorization") != f"Bearer {token}".encode():
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b"unauthorized"})
                    return
            await inner(scope, receive, send)

        return wrapped

    uvicorn.run(guarded(app), host="127.0.0.1", port=port, log_level="critical", lifespan="on")


if __name__ == "__main__":
    main()
