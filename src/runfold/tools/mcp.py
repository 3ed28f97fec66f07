"""Tools from Model Context Protocol servers, through the official `mcp` SDK (DESIGN.md §9).

The servers of `[mcp.<name>]` are started with a run and stopped with it; each is held by its
own task, so a server that dies fails only the calls made to it (`E_TOOL_OUTCOME_UNKNOWN` for a
call in flight) and is reported once as lost. Their tools join the tool table as
`<server>__<tool>`; the table is frozen into the prefix, so replay never needs a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runfold.core.canonical import Json, content_hash
from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.core.payloads import EndpointAttached, EndpointLost
from runfold.tools.context import ToolContext
from runfold.tools.registry import TOOL_NAME, Tool
from runfold.tools.results import ToolError, result_object

SEPARATOR = "__"
"""Between the server's name and its tool's name in the tool table (`files__read`)."""

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
"""Names a `[mcp.<name>]` table may have (they prefix tool names, so they stay short)."""

SERVER_KEYS: tuple[str, ...] = ("command", "args", "env", "url", "headers", "cwd", "startup_timeout_s")
"""The keys of one `[mcp.<name>]` table: `command`/`args`/`env`/`cwd` (stdio) or `url`/`headers`
(streamable HTTP), and how long the server may take to start and list its tools."""

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class McpServer:
    """One configured server: `name` (the table's name), either `command` (+ `args`, `env`,
    `cwd`, relative to the workspace) for stdio or `url` (+ `headers`) for streamable HTTP, and
    `startup_timeout_s` (seconds). `${VAR}` in `env` and `headers` values is read from the
    environment when the server starts, so keys stay out of config.toml."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 30.0

    @property
    def transport(self) -> str:
        """`stdio` or `http`."""
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """What the server is, in words: its command line or its URL."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)


def table_name(server: str, tool: str) -> str:
    """The tool-table name of `tool` of `server`: `<server>__<tool>`, with characters the
    providers refuse replaced by `_`, and cut to 64 with a hash suffix when longer, so every name
    matches `^[A-Za-z0-9_-]{1,64}$` and distinct tools keep distinct names."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{SEPARATOR}{tool}")
    if len(name) > 64 or name != f"{server}{SEPARATOR}{tool}":
        suffix = content_hash(tool.encode("utf-8"))[:8]
        name = f"{name[: 64 - 9]}_{suffix}" if len(name) > 64 else f"{name}_{suffix}"[:64]
    assert TOOL_NAME.match(name)
    return name


def _expand(values: Mapping[str, str], where: str, environ: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for key, value in values.items():

        def sub(m: re.Match[str], key: str = key) -> str:
            var = m.group(1)
            if var not in environ:
                raise RunfoldError(
                    ErrorCode.CONFIG_INVALID,
                    f"start the MCP server (its {where} {key!r} reads ${{{var}}})",
                    f"[mcp] {where}.{key}",
                    f"set the environment variable {var} (export {var}=...) or remove it from the table",
                )
            return environ[var]

        out[key] = _VAR.sub(sub, value)
    return out


class _ArgsOnly(BaseModel):
    """Placeholder argument model: an MCP tool's arguments are checked by its own JSON schema."""


@dataclass(frozen=True, eq=False)
class McpTool(Tool):
    """A tool of an MCP server: `remote` is its name on the server; arguments are checked
    against its `input_schema` (JSON Schema) and the call goes to the server's connection."""

    remote: str = ""
    server: str = ""
    endpoint: Endpoint | None = None

    def validate(self, args: Any) -> dict[str, Any]:
        """The arguments as given, once they match the tool's JSON schema. Raises
        `E_INVALID_ARGS` naming the first offending field."""
        import jsonschema

        if not isinstance(args, dict):
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                f"call tool `{self.name}`",
                "its arguments",
                "the arguments must be a JSON object; send an object with the fields of the tool's input_schema",
            )
        validator = jsonschema.validators.validator_for(self.input_schema)(self.input_schema)
        problem = jsonschema.exceptions.best_match(validator.iter_errors(args))
        if problem is not None:
            where = ".".join(str(p) for p in problem.absolute_path) or "arguments"
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                f"call tool `{self.name}`",
                f"argument `{where}`",
                f"{problem.message}; send arguments that match the tool's input_schema",
                nearby=tuple(self.input_schema.get("properties", {})),
            )
        return dict(args)

    def subject_of(self, args: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Json]:
        assert self.endpoint is not None
        return await self.endpoint.call(self, dict(args))


def _content(result: Any) -> dict[str, Json]:
    """A `CallToolResult` as a `tool_result.result` object: `content` (text blocks as
    `{type: text, text}`, others as their JSON without inline data), and `structured` (its
    JSON text) only when there is no content."""
    blocks: list[Any] = []
    for block in result.content:
        if getattr(block, "type", None) == "text":
            blocks.append({"type": "text", "text": block.text})
        else:
            dumped = block.model_dump(mode="json", exclude_none=True, by_alias=True)
            if "data" in dumped:
                dumped["data"] = f"({len(dumped['data'])} base64 characters not shown)"
            blocks.append(dumped)
    out: dict[str, Any] = {"content": blocks}
    if not blocks and result.structured_content is not None:
        out["structured"] = result.structured_content
    return result_object(out)


class Endpoint:
    """One server's connection, held open by its own task from `start` to `stop`."""

    def __init__(self, server: McpServer, workspace: Path, log_dir: Path | None) -> None:
        self.server = server
        self.workspace = workspace
        self.log_dir = log_dir
        self.tools: list[McpTool] = []
        self.lost: str | None = None
        self.reported = False
        self._client: Any = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None

    def _transport(self, environ: Mapping[str, str]) -> tuple[Any, list[Any]]:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        s = self.server
        if s.command is not None:
            cwd = self.workspace / s.cwd if s.cwd else self.workspace
            params = StdioServerParameters(
                command=s.command, args=list(s.args), env=_expand(s.env, "env", environ), cwd=cwd
            )
            errlog: Any = open(os.devnull, "w")
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                errlog.close()
                errlog = open(self.log_dir / f"mcp-{s.name}.log", "a", encoding="utf-8")
            return stdio_client(params, errlog=errlog), [errlog]
        http = create_mcp_http_client(headers=_expand(s.headers, "headers", environ))
        return streamable_http_client(str(s.url), http_client=http), [http]

    async def _keep(self) -> None:
        closers: list[Any] = []
        try:
            from mcp import Client

            transport, closers = self._transport(os.environ)
            async with Client(transport) as client:
                self._client = client
                listed: list[Any] = []
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self.tools = [self._tool(t) for t in listed]
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            why = _why(exc)
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, RunfoldError) else RuntimeError(why))
            elif not self._stop.is_set():
                self.lost = self.lost or why
            if isinstance(exc, asyncio.CancelledError) and not self._stop.is_set():
                raise
        finally:
            self._client = None
            for c in closers:
                with contextlib.suppress(Exception):
                    if hasattr(c, "aclose"):
                        await c.aclose()
                    else:
                        c.close()
            if not self._stop.is_set() and self.lost is None and self._ready.done():
                self.lost = "the connection ended"

    def _tool(self, listed: Any) -> McpTool:
        annotations = listed.annotations
        read_only = bool(annotations is not None and annotations.read_only_hint)
        schema = dict(listed.input_schema or {"type": "object"})
        schema.pop("title", None)
        schema.setdefault("properties", {})
        return McpTool(
            name=table_name(self.server.name, listed.name),
            description=(listed.description or listed.title or listed.name).strip(),
            input_schema=schema,
            effect="read" if read_only else "write",
            fn=_no_function,
            args_model=_ArgsOnly,
            params=(),
            remote=listed.name,
            server=self.server.name,
            endpoint=self,
        )

    async def start(self) -> None:
        """Start the server and list its tools. Raises `E_CONFIG_INVALID` naming the server when
        it does not start or answer within `startup_timeout_s`."""
        self._task = asyncio.ensure_future(self._keep())
        try:
            async with asyncio.timeout(self.server.startup_timeout_s):
                await asyncio.shield(self._ready)
        except TimeoutError:
            await self.stop()
            raise self._failed(f"no answer within {self.server.startup_timeout_s:g} s") from None
        except RunfoldError:
            await self.stop()
            raise
        except Exception as exc:
            await self.stop()
            raise self._failed(str(exc)) from None

    def _failed(self, why: str) -> RunfoldError:
        log = f"; its stderr is in .runfold/logs/mcp-{self.server.name}.log" if self.server.command else ""
        return RunfoldError(
            ErrorCode.CONFIG_INVALID,
            f"start the MCP server `{self.server.name}` ({why})",
            f"[mcp.{self.server.name}] {self.server.target}",
            f"check the server's {'command and args' if self.server.command else 'url and headers'}{log}, "
            f"or remove [mcp.{self.server.name}] from .runfold/config.toml",
        )

    async def stop(self) -> None:
        """Stop the server (idempotent)."""
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(self._task)
            except (TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task

    async def call(self, tool: McpTool, args: dict[str, Any]) -> dict[str, Json]:
        """Call `tool` on this server. Raises `E_TOOL_UNKNOWN` when the server was lost before
        the call (nothing ran), `E_TOOL_OUTCOME_UNKNOWN` when it was lost during the call or the
        server reported the call failed (its text in `detail`)."""
        client = self._client
        if self.lost is not None or client is None:
            raise RunfoldError(
                ErrorCode.TOOL_UNKNOWN,
                f"call MCP tool `{tool.name}` (its server `{self.server.name}` is gone: {self.lost})",
                f"call of `{tool.remote}` on {self.server.name}",
                "the call did not run; use another tool, or continue the run (a new run starts the server again)",
                retry=Retry.NO,
            )
        assert self._task is not None
        call = asyncio.ensure_future(client.call_tool(tool.remote, args))
        try:
            await asyncio.wait({call, self._task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            raise
        if not call.done():  # the connection ended first
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            self.lost = self.lost or "the connection ended"
            raise self._unknown(tool, self.lost)
        try:
            result = call.result()
        except Exception as exc:
            from mcp import MCPError

            if isinstance(exc, MCPError) and self._task.done() is False and "closed" not in str(exc).lower():
                raise ToolError(
                    ErrorCode.INVALID_ARGS,
                    f"call MCP tool `{tool.name}` (the server refused it: {str(exc)[:300]})",
                    f"call of `{tool.remote}` on {self.server.name}",
                    "change the arguments or use another tool",
                ) from None
            self.lost = self.lost or _why(exc)
            raise self._unknown(tool, self.lost) from None
        if result.is_error:
            raise ToolError(
                ErrorCode.TOOL_OUTCOME_UNKNOWN,
                f"run MCP tool `{tool.name}` (the server reported an error)",
                f"call of `{tool.remote}` on {self.server.name}",
                "read the server's message in detail; change the arguments or check before retrying",
                retry=Retry.UNKNOWN,
                detail=_content(result),
            )
        return _content(result)

    def _unknown(self, tool: McpTool, why: str) -> RunfoldError:
        return RunfoldError(
            ErrorCode.TOOL_OUTCOME_UNKNOWN,
            f"finish MCP tool call `{tool.name}` (its server `{self.server.name}` was lost: {why})",
            f"call of `{tool.remote}` on {self.server.name}",
            "the tool may or may not have acted; check before retrying (a new run starts the server again)",
            retry=Retry.UNKNOWN,
        )


def _no_function(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("an MCP tool is called through its server")


def _why(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_why(e) for e in exc.exceptions)[:300]
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


class Endpoints:
    """The MCP servers of one run, started: their tools (in config order, then each server's
    listing order), the `endpoint_attached` lines to record, and `endpoint_lost` lines as servers
    stop answering (each once)."""

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.endpoints = list(endpoints)

    @property
    def tools(self) -> list[McpTool]:
        return [t for e in self.endpoints for t in e.tools]

    def attached(self) -> list[EndpointAttached]:
        """One `endpoint_attached` per server, in config order."""
        return [
            EndpointAttached(
                kind="mcp", name=e.server.name, transport=e.server.transport, tools=[t.name for t in e.tools]
            )
            for e in self.endpoints
        ]

    def lines(self, attached: bool) -> list[EndpointAttached | EndpointLost]:
        """`attached()` (when `attached`) then `drain_lost()`: the lines due now."""
        return [*(self.attached() if attached else ()), *self.drain_lost()]

    def drain_lost(self) -> list[EndpointLost]:
        """An `endpoint_lost` for every server lost since the last call."""
        out = []
        for e in self.endpoints:
            if e.lost is not None and not e.reported:
                e.reported = True
                out.append(EndpointLost(name=e.server.name, reason=e.lost))
        return out


@contextlib.asynccontextmanager
async def started(
    servers: Sequence[McpServer], workspace: Path, log_dir: Path | None = None
) -> AsyncIterator[Endpoints]:
    """Start `servers` (concurrently) for the length of the block and stop them after it.
    Raises `E_CONFIG_INVALID` naming the first server that does not start (the others are
    stopped), or when the `mcp` package is not installed."""
    if servers:
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise RunfoldError(
                ErrorCode.CONFIG_INVALID,
                "start the MCP servers of [mcp] (the `mcp` package is not installed)",
                "this Python environment",
                "install it (pip install 'runfold[mcp]') or remove the [mcp.*] tables from .runfold/config.toml",
            ) from None
    endpoints = [Endpoint(s, workspace, log_dir) for s in servers]
    try:
        results = await asyncio.gather(*(e.start() for e in endpoints), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        yield Endpoints(endpoints)
    finally:
        await asyncio.gather(*(e.stop() for e in endpoints), return_exceptions=True)


@dataclass(frozen=True)
class Listing:
    """What `runfold mcp list` shows of one server: its config, its tools as
    `(table name, effect, description)` in table order, or the `error` that kept it from starting."""

    server: McpServer
    tools: tuple[tuple[str, str, str], ...] = ()
    error: RunfoldError | None = None


async def list_servers(servers: Sequence[McpServer], workspace: Path, log_dir: Path | None = None) -> list[Listing]:
    """Start each server in turn, list its tools and stop it; a server that does not start is
    listed with its error (the others are still listed)."""
    out = []
    for s in servers:
        try:
            async with started([s], workspace, log_dir) as endpoints:
                tools = tuple((t.name, t.effect, t.description) for t in endpoints.tools)
            out.append(Listing(s, tools))
        except RunfoldError as err:
            out.append(Listing(s, error=err))
    return out
