"""The HTTP API of `runfold serve` under `/api/` (FastAPI; its OpenAPI schema at
`/api/openapi.json`): dispatch, steer, cancel, fork, continue, list and read runs, verify, and a
run's lines as Server-Sent Events from any seq (DESIGN.md §5, §7, §11).

Every error is runfold's shape (`{"error": {code, action, subject, nearby, recovery, retry},
"message": "E_CODE: cannot … — …"}`) with a 4xx status, and changes nothing. With a token, every
route but `/api/health` asks for `Authorization: Bearer <token>` (401 otherwise; the value is
never logged). Other routers (the web page) may be mounted beside it on the same app.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from runfold import __version__
from runfold.core.approval import ApprovalClass, Policy
from runfold.core.canonical import I64_MAX
from runfold.core.errors import ErrorCode, Retry, RunfoldError, invalid_args
from runfold.core.fold import RunSummary
from runfold.server.limits import DEFAULT_MAX_BODY, BodyLimit, too_large
from runfold.server.owner import Hosted, RunOwner
from runfold.tools import BUILTIN_NAMES, OPT_IN_NAMES

API = "/api"

SEQ_BOUNDS: dict[str, int] = {"ge": 0, "le": I64_MAX}
"""What a seq given to the API may be (`?since=`, `Last-Event-ID`): a whole number in the
ledger's range, parsed and refused (422) by one validator whichever way it comes."""

_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGS: 400,
    ErrorCode.PATH_NOT_FOUND: 404,
    ErrorCode.CONFIG_INVALID: 400,
    ErrorCode.LEDGER_HELD: 409,
    ErrorCode.WIRE_MISMATCH: 400,
    ErrorCode.STORAGE_FATAL: 503,
    ErrorCode.LEDGER_CORRUPT: 500,
    ErrorCode.INTERNAL: 500,
}


_BEARER = HTTPBearer(auto_error=False, description="The token in .runfold/serve/token")


class ApiError(Exception):
    """A `RunfoldError` answered with `status` (e.g. 409 for a state that refuses the action)."""

    def __init__(self, status: int, error: RunfoldError) -> None:
        super().__init__(error.display())
        self.status = status
        self.error = error


# ---- schemas ---------------------------------------------------------------------------------


class ErrorBody(BaseModel):
    code: str
    action: str
    subject: str
    nearby: list[str]
    recovery: str
    retry: str


class ErrorResponse(BaseModel):
    """runfold's error shape (DESIGN.md §11) and its one-line display."""

    error: ErrorBody
    message: str


ToolName = Annotated[str, Field(json_schema_extra={"enum": [*BUILTIN_NAMES, *OPT_IN_NAMES]})]
"""A built-in tool's name (an unknown name is refused with the closest ones)."""
Approvals = dict[ApprovalClass, Policy]
"""Approval policies per tool class, laid over `[approvals]` of config.toml for one run (the
command line's `--approve CLASS=POLICY` and `--yes`, DESIGN.md §9)."""
ROOM_PATTERN = r"^[^/\\:\x00-\x1f\x7f]+(/[^/\\:\x00-\x1f\x7f]+)*$"
"""A room address: relative, `/`-separated non-empty segments without `\\`, `:` or control
characters (`.` and `..` segments and `.runfold` are refused too, DESIGN.md §9)."""


class SessionRequest(BaseModel):
    """The interactive session a run opens (`runfold chat`'s first turn): recorded as its
    `session_opened` line, `from` = `{run, at_seq}` when both are given."""

    model_config = ConfigDict(extra="forbid")

    carried: bool = Field(False, description="Whether the previous session's conversation travels with this one.")
    run: str | None = Field(None, description="The run the previous session ended with.")
    at_seq: int | None = Field(None, ge=0, le=I64_MAX, description="That run's last seq.")


class RunRequest(BaseModel):
    """What a run is asked to do; a field left out takes the workspace's default."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(pattern=r"\S", description="The person's words: what the agent should do (not blank).")
    goal: str = Field("", description="What done looks like (the run's system segment).")
    model: str | None = Field(None, description="Model SPEC: local, anthropic:<model>, openai:<model>, script:<file> …")
    room: str = Field(".", pattern=ROOM_PATTERN, description="The run's address: where it may write (`.`: the root).")
    max_turns: int | None = Field(None, ge=1, le=I64_MAX, description="Turn ceiling.")
    builtin_tools: bool | list[ToolName] | None = Field(None, description="True, False or built-in tool names.")
    system: str | None = Field(None, description="Replaces the default system text.")
    session: SessionRequest | None = Field(None, description="The session this run opens (a chat's first turn).")
    agents: bool = Field(
        False, description="Add the agent tools: send_message, delegate (child runs) and wait_for_reply."
    )
    approvals: Approvals | None = Field(None, description="Approval policy per tool class, over config.toml's.")


class ContinueRequest(BaseModel):
    """A successor of a frozen run; `task` empty keeps the run's own task."""

    model_config = ConfigDict(extra="forbid")

    task: str = ""
    model: str | None = None
    max_turns: int | None = Field(None, ge=1, le=I64_MAX)
    builtin_tools: bool | list[ToolName] | None = None
    session: SessionRequest | None = Field(None, description="The session this run opens (a chat's first turn).")
    approvals: Approvals | None = Field(None, description="Approval policy per tool class, over config.toml's.")


class ForkRequest(ContinueRequest):
    """A fork cut at the last safe point ≤ `at`; `start` runs it at once."""

    at: int = Field(ge=0, description="The seq to cut at (never clamped).")
    start: bool = Field(False, description="Run the fork now (else it waits, `not_started`).")


class SteerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="The words delivered at the run's next safe point.")
    wait: bool = Field(False, description="Answer once the run recorded it (with its seq).")


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wait: bool = Field(False, description="Answer once the run recorded the cancel.")


class RunInfo(BaseModel):
    """One run: `state` is `queued`, `running`, `refused` (could not start), `dropped`
    (cancelled while queued), or the ledger's status once it has lines (`done`, `limit`,
    `cancelled`, `died`, `not_started`)."""

    run: str
    state: str
    task: str = ""
    model: str | None = None
    room: str | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    lines: int = 0
    turns: int = 0
    cause: str | None = None
    error_code: str | None = None
    parent: str | None = None
    predecessor: str | None = None
    forked_from: str | None = None
    forked_at: int | None = None
    owner: str | None = None
    error: ErrorBody | None = None


class RunList(BaseModel):
    runs: list[RunInfo]


class RunDetail(BaseModel):
    run: RunInfo
    lines: list[dict[str, Any]] | None = None


class ControlAnswer(BaseModel):
    run: str
    signal: str | None
    state: Literal["accepted", "recorded", "dropped"]
    seq: int | None = None


class ForkAnswer(BaseModel):
    """The fork: `cut` is the last safe point ≤ `at` actually used, `moved` why it differs."""

    run: str
    mother: str
    at: int
    cut: int
    state: str
    moved: str | None = None
    messages: int = 0


class VerifyAnswer(BaseModel):
    ok: bool
    lines: int
    head: str


class ServerInfo(BaseModel):
    version: str
    workspace: str
    pid: int
    owner: str
    max_runs: int
    running: int
    queued: int
    next_seq: int
    batches: int
    lines: int


_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing or wrong bearer token"},
}
_BAD: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "a bad argument (e.g. a run prefix several runs share)"},
    422: {"model": ErrorResponse, "description": "the body or a parameter does not fit the schema"},
}
_TOO_LARGE: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorResponse, "description": "the request body is longer than the server's ceiling (--max-body)"},
}
_RUN_ERRORS: dict[int | str, dict[str, Any]] = {
    **_BAD,
    404: {"model": ErrorResponse, "description": "no run has that id or prefix"},
}
_STATE_ERRORS: dict[int | str, dict[str, Any]] = {
    **_RUN_ERRORS,
    409: {"model": ErrorResponse, "description": "the run's state refuses it (queued, frozen, …); the message names it"},
}


def error_json(err: RunfoldError) -> dict[str, Any]:
    """runfold's error shape as an HTTP body."""
    return {
        "error": {
            "code": err.code.value,
            "action": err.action,
            "subject": err.subject,
            "nearby": list(err.nearby),
            "recovery": err.recovery,
            "retry": err.retry.value,
        },
        "message": err.display(),
    }


def _info(owner: RunOwner, run: str, summary: RunSummary | None, hosted: Hosted | None) -> RunInfo:
    if summary is None:
        assert hosted is not None
        err = ErrorBody(**error_json(hosted.error)["error"]) if hosted.error is not None else None
        return RunInfo(run=run, state=hosted.state, task=str(hosted.request.get("task", "")), error=err)
    s = asdict(summary)
    return RunInfo(
        run=run,
        state=summary.status,
        task=summary.task,
        model=summary.model,
        room=summary.addr,
        first_seq=summary.first_seq,
        last_seq=summary.last_seq,
        lines=summary.lines,
        turns=summary.turns,
        cause=summary.cause,
        error_code=summary.error_code,
        parent=s.get("parent"),
        predecessor=summary.predecessor,
        forked_from=summary.forked_from,
        forked_at=summary.forked_at,
        owner=owner.claims.owner(run),
    )


def _summaries(owner: RunOwner, runs: Sequence[str] | None = None) -> dict[str, RunSummary]:
    if runs is None:
        return {s.run: s for s in owner.ws.run_summaries()}
    from runfold.core.fold import run_summaries
    from runfold.runtime.cost import workspace_pricing

    pricing = workspace_pricing(owner.ws.settings().prices)
    out: dict[str, RunSummary] = {}
    for run in runs:
        lines = owner.lines(run)
        if lines:
            for s in run_summaries(lines, pricing):
                out[s.run] = s
    return out


def _sse(rec_raw: bytes, seq: int, kind: str) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, kind.encode(), rec_raw)


def build_app(
    owner: RunOwner, token: str | None, *, routers: Sequence[APIRouter] = (), max_body: int = DEFAULT_MAX_BODY
) -> FastAPI:
    """The FastAPI app serving `owner` under `/api/` (docs at `/api/docs`), asking for `token`
    as a bearer token on every route but `/api/health` (None: no token asked). `routers` are
    included after the API (e.g. the web page at `/`). A request body longer than `max_body`
    bytes is answered 413 in runfold's error shape before any route acts on it."""
    if max_body < 1:
        raise invalid_args("serve the API", f"--max-body {max_body}", "give a body ceiling of at least 1 byte")
    # the docs page's Swagger UI is served from the package, never a CDN: it works offline
    app = FastAPIOffline(
        title="runfold",
        version=__version__,
        description="One owner of a workspace's ledger hosting many agent runs.",
        openapi_url=f"{API}/openapi.json",
        docs_url=f"{API}/docs",
        redoc_url=None,
        static_url=f"{API}/docs/static",
        swagger_ui_oauth2_redirect_url=f"{API}/docs/oauth2-redirect",
    )
    def auth(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]) -> None:
        if token is None:
            return
        given = creds.credentials if creds is not None else ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise ApiError(
                401,
                RunfoldError(
                    ErrorCode.INVALID_ARGS,
                    "authenticate the request (" + ("wrong bearer token" if creds else "no bearer token") + ")",
                    "the Authorization header",
                    "send `Authorization: Bearer <token>` with the token in .runfold/serve/token",
                    retry=Retry.NO,
                ),
            )

    app.add_middleware(BodyLimit, limit=max_body, render=error_json)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_json(exc.error), status_code=exc.status)

    @app.exception_handler(RunfoldError)
    async def _runfold_error(_: Request, exc: RunfoldError) -> JSONResponse:
        return JSONResponse(error_json(exc), status_code=_STATUS.get(exc.code, 400))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or "the request"
        err = invalid_args(
            f"read the request ({first.get('msg', 'it does not fit the schema')})",
            where,
            f"fix {where} as the schema at {API}/openapi.json says",
        )
        return JSONResponse(error_json(err), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 413:
            return JSONResponse(error_json(too_large(max_body)), status_code=413)
        err = RunfoldError(
            ErrorCode.INVALID_ARGS if exc.status_code < 500 else ErrorCode.INTERNAL,
            f"serve the request ({exc.detail})",
            "the request's path or method",
            f"see {API}/docs for the routes",
        )
        return JSONResponse(error_json(err), status_code=exc.status_code)

    api = APIRouter(prefix=API, dependencies=[Depends(auth)], responses=_AUTH)
    # Every route that reads the owner's ledger is `async def`: the writer (its index, its
    # sqlite connection, its view of the tail) is used only on the owner's event loop. A plain
    # `def` route runs in a worker thread and raced the runs' appends (a segfault in sqlite).

    def run_of(run: str) -> str:
        return owner.resolve(run)

    def info(run: str) -> RunInfo:
        summaries = _summaries(owner, [run]) if owner.hosted.get(run) is None or owner.lines(run) else {}
        h = owner.hosted.get(run)
        i = _info(owner, run, summaries.get(run), h)
        if h is not None and h.state == "queued":
            i.state = "queued"
        return i

    @api.get("/server", response_model=ServerInfo, summary="The serving owner")
    async def server_info() -> ServerInfo:
        import os

        queued = sum(1 for h in owner.hosted.values() if h.state == "queued")
        return ServerInfo(
            version=__version__,
            workspace=str(owner.ws.root),
            pid=os.getpid(),
            owner=getattr(owner.claims, "name", ""),
            max_runs=owner.max_runs,
            running=len(owner.running),
            queued=queued,
            next_seq=owner.ledger.next_seq,
            batches=owner.events.batches,
            lines=owner.events.lines,
        )

    @api.get("/runs", response_model=RunList, summary="List runs")
    async def list_runs() -> RunList:
        summaries = _summaries(owner)
        runs = [_info(owner, r, s, owner.hosted.get(r)) for r, s in summaries.items()]
        runs += [_info(owner, r, None, h) for r, h in owner.hosted.items() if r not in summaries]
        return RunList(runs=runs)

    @api.post("/runs", response_model=RunInfo, status_code=202, responses={**_BAD, **_TOO_LARGE}, summary="Dispatch a run")
    async def dispatch(body: RunRequest) -> RunInfo:
        h = await owner.dispatch(body.model_dump(exclude_none=True))
        return info(h.run)

    @api.get("/runs/{run}", response_model=RunDetail, responses=_RUN_ERRORS, summary="Read a run")
    async def read_run(run: str, lines: bool = Query(False, description="Include the run's lines.")) -> RunDetail:
        rid = run_of(run)
        body = [orjson.loads(r.raw) for r in owner.lines(rid)] if lines else None
        return RunDetail(run=info(rid), lines=body)

    @api.post("/runs/{run}/steer", response_model=ControlAnswer, status_code=202, responses={**_STATE_ERRORS, **_TOO_LARGE}, summary="Steer a run")
    async def steer(run: str, body: SteerRequest) -> ControlAnswer:
        rid = run_of(run)
        return ControlAnswer(**await _control(rid, "steer", body.text, body.wait))

    @api.post("/runs/{run}/cancel", response_model=ControlAnswer, status_code=202, responses={**_STATE_ERRORS, **_TOO_LARGE}, summary="Cancel a run")
    async def cancel(run: str, body: CancelRequest | None = None) -> ControlAnswer:
        rid = run_of(run)
        return ControlAnswer(**await _control(rid, "cancel", "", body.wait if body else False))

    async def _control(rid: str, type: str, text: str, wait: bool) -> dict[str, Any]:
        try:
            return await owner.control(rid, type, text, wait=wait)
        except RunfoldError as err:
            if err.code is ErrorCode.INVALID_ARGS and err.subject == f"run {rid}":
                raise ApiError(409, err) from None
            raise

    @api.post("/runs/{run}/fork", response_model=ForkAnswer, status_code=201, responses={**_RUN_ERRORS, **_TOO_LARGE}, summary="Fork a run (and run it)")
    async def fork(run: str, body: ForkRequest) -> ForkAnswer:
        rid = owner.resolve(run, ledger_only=True)
        if body.start:
            request = body.model_dump(exclude_none=True, exclude={"at", "start"})
            request["fork"] = {"run": rid, "at": body.at}
            h = await owner.dispatch(request)
            cut = next((r.env.data.get("at_seq") for r in owner.lines(h.run) if r.env.kind == "run_forked"), None)
            at = cut if isinstance(cut, int) else body.at
            return ForkAnswer(run=h.run, mother=rid, at=body.at, cut=at, state=info(h.run).state)
        plan = await owner.fork(rid, body.at, body.task or None)
        return ForkAnswer(
            run=plan.new_run,
            mother=rid,
            at=body.at,
            cut=plan.cut,
            state="not_started",
            moved=plan.moved,
            messages=len(plan.inherited.messages),
        )

    @api.post("/runs/{run}/continue", response_model=RunInfo, status_code=202, responses={**_STATE_ERRORS, **_TOO_LARGE}, summary="Continue a frozen run")
    async def continue_run(run: str, body: ContinueRequest) -> RunInfo:
        rid = owner.resolve(run, ledger_only=True)
        request: dict[str, Any] = body.model_dump(exclude_none=True)
        request["continues"] = rid
        try:
            h = await owner.dispatch(request)
        except RunfoldError as err:
            if err.code is ErrorCode.INVALID_ARGS and "still running" in err.recovery:
                raise ApiError(409, err) from None
            raise
        return info(h.run)

    @api.get(
        "/runs/{run}/events",
        responses={**_RUN_ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "the run's lines"}},
        summary="Stream a run's lines (SSE)",
        response_class=StreamingResponse,
    )
    async def events(
        run: str,
        since: Annotated[int, Query(description="The first seq wanted (a line of the run at or after it).", **SEQ_BOUNDS)] = 0,
        last_event_id: Annotated[
            int | None, Header(description="Resume after this seq (the `id` of the last event received).", **SEQ_BOUNDS)
        ] = None,
    ) -> StreamingResponse:
        rid = run_of(run)
        start = since if last_event_id is None else last_event_id + 1
        head = owner.ledger.next_seq
        if start > head:
            raise invalid_args(
                f"stream the run's lines from seq {start} (past the ledger's head)",
                f"run {rid}",
                f"ask from a seq ≤ {head}: the ledger's last line is seq {head - 1}",
            )
        return StreamingResponse(_stream(rid, start), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def _stream(rid: str, start: int) -> AsyncIterator[bytes]:
        async for rec in owner.events.stream(owner.ledger, rid, start, live=lambda: owner.live(rid)):
            if rec is None:
                yield b": keep-alive\n\n"
            else:
                yield _sse(rec.raw, rec.seq, rec.env.kind)
        yield b'event: end\ndata: {"run":"%s"}\n\n' % rid.encode()

    @api.get("/verify", response_model=VerifyAnswer, summary="Verify the ledger")
    async def verify() -> VerifyAnswer:
        report = await asyncio.to_thread(owner.ws.verify)
        return VerifyAnswer(ok=True, lines=report.lines, head=report.head)

    app.include_router(api)

    @app.get(API, include_in_schema=False)
    @app.get(f"{API}/", include_in_schema=False)
    async def api_root() -> RedirectResponse:
        return RedirectResponse(f"{API}/docs")  # the address `serve` prints answers with the docs

    @app.get(f"{API}/health", summary="Liveness (no token asked)")
    def health() -> dict[str, bool]:
        return {"ok": True}

    for r in routers:
        app.include_router(r)
    return app


__all__ = ["API", "ApiError", "build_app", "error_json"]
