"""The ASGI app of the provider test servers: `POST /v1/messages` (Anthropic) and
`POST /v1/chat/completions`, `POST /v1/responses` (OpenAI), answering from a script, and
`POST /v1/messages/count_tokens` (Anthropic), answering a deterministic count without one.

Every request is recorded (raw bytes and parsed body). A request passes auth, JSON parsing and
the provider's checks (`rules.check`) before it takes the next script entry, so a refused request
never consumes a reply; the entry is then either a reply (streamed or not) or a fault.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from . import errors, render, rules
from .cache import PromptCache
from .errors import ErrorReply
from .script import Entry, Fault, Reply, Usage, parse_script
from .sse import dumps

ANTHROPIC = rules.ANTHROPIC
OPENAI_CHAT = rules.OPENAI_CHAT
OPENAI_RESPONSES = rules.OPENAI_RESPONSES
CREATED_BASE = 1_760_000_000
"""`created` of request n is CREATED_BASE + n (unix seconds): answers are deterministic."""
COUNT_KEYS = {
    "model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers", "context_management",
} | rules._sdk_keys("anthropic.types.message_count_tokens_params", "MessageCountTokensParams")  # fmt: skip
"""The fields `/v1/messages/count_tokens` takes; any other is refused as the API refuses it."""
BYTES_PER_COUNTED_TOKEN = 3
UNBOUNDED_OUTPUT = 1 << 30
"""The `max_tokens` a count body is checked with (any thinking budget is below it)."""


@dataclass
class RecordedRequest:
    """One request the server received: dialect, path, lowercase headers, the raw body bytes,
    the parsed body (None when not JSON), the status answered, the refusal message (None when
    answered from the script), the script entry index used, and whether it asked to stream."""

    dialect: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any = None
    status: int = 0
    error: str | None = None
    entry: int | None = None
    stream: bool = False


@dataclass
class ServerState:
    """Script, records and settings shared by the app (uvicorn's thread) and the test thread.

    `api_key`: when set, only this key is accepted (else any non-empty key); `chunk`: code points
    per streamed delta; `signatures`: thinking signature → thinking text of every thinking block
    this server issued (an edited block is refused); `cache`: with `prompt_cache`, the prompt
    cache entries written (`cache.PromptCache`: the cache reads and writes of a reply's usage
    when the script gives none; without it that usage reads and writes nothing); `responder`: called with `(dialect, body)` for an entry when the script is empty
    (None: the request is refused)."""

    script: deque[Entry]
    api_key: str | None = None
    chunk: int = 7
    requests: list[RecordedRequest] = field(default_factory=list)
    signatures: dict[str, str] = field(default_factory=dict)
    used: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    prompt_cache: bool = False
    cache: PromptCache = field(default_factory=PromptCache)
    responder: Callable[[str, dict[str, Any]], Any] | None = None

    def push(self, entries: Iterable[Any]) -> None:
        """Append entries (raw JSON-shaped dicts or parsed) to the script."""
        parsed = parse_script(entries)
        with self.lock:
            self.script.extend(parsed)

    def take(self, dialect: str = "", body: Any = None) -> tuple[int, Entry] | None:
        with self.lock:
            if not self.script:
                if self.responder is None:
                    return None
                (entry,) = parse_script([self.responder(dialect, body)])
                self.used += 1
                return self.used - 1, entry
            self.used += 1
            return self.used - 1, self.script.popleft()

    def record(self, rec: RecordedRequest) -> int:
        with self.lock:
            self.requests.append(rec)
            return len(self.requests) - 1


class RawResponse:
    """An ASGI response sending `chunks` one by one; with `cut_after` it stops after that many
    chunks without finishing the body, so the server drops the connection mid-response."""

    def __init__(
        self, status: int, headers: dict[str, str], chunks: list[bytes], cut_after: int | None = None
    ):
        self.status = status
        self.headers = headers
        self.chunks = chunks
        self.cut_after = cut_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_headers = [(k.lower().encode(), v.encode()) for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": self.status, "headers": raw_headers})
        for i, chunk in enumerate(self.chunks):
            if self.cut_after is not None and i >= self.cut_after:
                return  # never finish: uvicorn closes the connection mid-body
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def json_response(
    status: int, body: Any, headers: dict[str, str] | None = None, cut: bool = False
) -> RawResponse:
    data = dumps(body).encode()
    hdrs = {"content-type": "application/json", "content-length": str(len(data)), **(headers or {})}
    if cut:
        return RawResponse(status, hdrs, [data[: len(data) // 2], data[len(data) // 2 :]], cut_after=1)
    return RawResponse(status, hdrs, [data])


def sse_response(chunks: list[bytes], headers: dict[str, str], cut_after: int | None = None) -> RawResponse:
    hdrs = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", **headers}
    return RawResponse(200, hdrs, chunks, cut_after)


def _request_id(dialect: str, n: int) -> str:
    return f"req_test{n:06d}"


def _error(dialect: str, status: int, message: str, n: int, rej: rules.Rejection | None = None) -> ErrorReply:
    if dialect == ANTHROPIC:
        return errors.anthropic(status, message, _request_id(dialect, n))
    kind = "invalid_request_error"
    return errors.openai(
        status, message, type=kind, param=rej.param if rej else None, code=rej.code if rej else None
    )


def _auth(dialect: str, headers: dict[str, str], state: ServerState, n: int) -> ErrorReply | None:
    auth = headers.get("authorization", "")
    bearer = auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else ""
    if dialect == ANTHROPIC:
        # `x-api-key` (the documented header) or `Authorization: Bearer` (what newer SDKs send)
        key = headers.get("x-api-key", "") or bearer
        if not key:
            return errors.anthropic(401, errors.ANTHROPIC_NO_KEY, _request_id(dialect, n))
        if state.api_key is not None and key != state.api_key:
            return errors.anthropic(401, errors.ANTHROPIC_BAD_KEY, _request_id(dialect, n))
        if not headers.get("anthropic-version"):
            return errors.anthropic(400, errors.ANTHROPIC_NO_VERSION, _request_id(dialect, n))
        return None
    key = bearer
    if not key:
        return errors.openai(401, errors.OPENAI_NO_KEY)
    if state.api_key is not None and key != state.api_key:
        return errors.openai(401, errors.openai_bad_key(key), code="invalid_api_key")
    return None


def _send_error(rec: RecordedRequest, err: ErrorReply, *, dialect: str, n: int) -> RawResponse:
    rec.status = err.status
    rec.error = err.message
    extra = {} if dialect == ANTHROPIC else {"x-request-id": _request_id(dialect, n)}
    return json_response(err.status, err.body, {**err.headers, **extra})


def counted_tokens(body: dict[str, Any]) -> int:
    """The test server's token count of a count_tokens body: one token per
    `BYTES_PER_COUNTED_TOKEN` bytes of its compact JSON with sorted keys, rounded up (a figure
    no byte estimate of the Messages body reproduces by chance)."""
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return -(-len(data) // BYTES_PER_COUNTED_TOKEN)


def _count(state: ServerState, rec: RecordedRequest, n: int, body: Any) -> RawResponse:
    """Anthropic's token count of a parsed body (auth already passed): the fields it does not
    take are refused (`max_tokens` among them), then the Messages checks, then
    `{"input_tokens": counted_tokens(body)}`; no script entry is used."""
    if not isinstance(body, dict):
        return _send_error(
            rec, _error(ANTHROPIC, 400, "Input should be an object", n), dialect=ANTHROPIC, n=n
        )
    for key in body:
        if key not in COUNT_KEYS:
            msg = f"{key}: Extra inputs are not permitted"
            return _send_error(rec, _error(ANTHROPIC, 400, msg, n), dialect=ANTHROPIC, n=n)
    with state.lock:
        signatures = dict(state.signatures)
    rej = rules.check(ANTHROPIC, {**body, "max_tokens": UNBOUNDED_OUTPUT}, signatures)
    if rej:
        return _send_error(rec, _error(ANTHROPIC, 400, rej.message, n, rej), dialect=ANTHROPIC, n=n)
    rec.status = 200
    return json_response(
        200, {"input_tokens": counted_tokens(body)}, {"request-id": _request_id(ANTHROPIC, n)}
    )


def make_app(state: ServerState) -> Starlette:
    """The Starlette app serving the four endpoints from `state`."""

    async def handle(request: Request, dialect: str, count: bool = False) -> RawResponse:
        raw = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        rec = RecordedRequest(dialect, request.url.path, headers, raw)
        n = state.record(rec)
        denied = _auth(dialect, headers, state, n)
        if denied:
            return _send_error(rec, denied, dialect=dialect, n=n)
        try:
            body = json.loads(raw)
        except ValueError:
            msg = (
                "There was an error parsing the body of your request"
                if dialect == ANTHROPIC
                else "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
                "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
                "valid JSON.)"
            )
            return _send_error(rec, _error(dialect, 400, msg, n), dialect=dialect, n=n)
        rec.body = body
        if count:
            return _count(state, rec, n, body)
        rec.stream = isinstance(body, dict) and body.get("stream") is True
        with state.lock:
            signatures = dict(state.signatures)
        rej = rules.check(dialect, body, signatures)
        if rej:
            return _send_error(rec, _error(dialect, 400, rej.message, n, rej), dialect=dialect, n=n)
        taken = state.take(dialect, body)
        if taken is None:
            msg = (
                f"provider test server: the script has no entry left for request {n} "
                f"({state.used} used); add replies to the script"
            )
            return _send_error(rec, _error(dialect, 400, msg, n), dialect=dialect, n=n)
        rec.entry, entry = taken
        if entry.delay_ms:
            await asyncio.sleep(entry.delay_ms / 1000)
        return _answer(state, rec, dialect, n, body, entry)

    async def messages(request: Request) -> RawResponse:
        return await handle(request, ANTHROPIC)

    async def count_tokens(request: Request) -> RawResponse:
        return await handle(request, ANTHROPIC, count=True)

    async def chat(request: Request) -> RawResponse:
        return await handle(request, OPENAI_CHAT)

    async def responses(request: Request) -> RawResponse:
        return await handle(request, OPENAI_RESPONSES)

    routes = [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def _answer(
    state: ServerState, rec: RecordedRequest, dialect: str, n: int, body: dict[str, Any], entry: Entry
) -> RawResponse:
    model = str(body.get("model", ""))
    if isinstance(entry, Fault) and entry.fault == "http_400_echo_auth":
        said = f"bad request headers: authorization={rec.headers.get('authorization', '')!r} x-api-key={rec.headers.get('x-api-key', '')!r}"
        return _send_error(rec, _error(dialect, 400, said, n), dialect=dialect, n=n)
    if isinstance(entry, Fault) and entry.fault.startswith("http_"):
        if dialect == ANTHROPIC:
            err = errors.anthropic_fault(entry.fault, entry.retry_after_ms, _request_id(dialect, n))
        else:
            err = errors.openai_fault(entry.fault, entry.retry_after_ms, model)
        return _send_error(rec, err, dialect=dialect, n=n)
    reply = entry.partial if isinstance(entry, Fault) else entry
    assert isinstance(reply, Reply)
    estimated = render.estimate_usage(reply, len(rec.raw))
    read = write = 0
    if state.prompt_cache:  # the cache is written whether the script gives usage or not
        read, write = state.cache.usage(dialect, body, estimated.input)
    usage = reply.usage or Usage(estimated.input - read - write, estimated.output, read, write)
    ctx = render.Ctx(n=n, model=model, created=CREATED_BASE + n, usage=usage, chunk=state.chunk, request=body)
    if isinstance(entry, Reply):
        with state.lock:
            for b in reply.blocks:
                if b["kind"] == "thinking":
                    state.signatures[b["signature"]] = b["thinking"]
    rid = _request_id(dialect, n)
    headers = {"request-id": rid} if dialect == ANTHROPIC else {"x-request-id": rid}
    stream = body.get("stream") is True
    fault = entry.fault if isinstance(entry, Fault) else None
    if not stream:
        if fault == "stream_error":
            err = (
                errors.anthropic_fault("http_529", None, rid)
                if dialect == ANTHROPIC
                else errors.openai_fault("http_500", None, model)
            )
            return _send_error(rec, err, dialect=dialect, n=n)
        if dialect == ANTHROPIC:
            obj = render.anthropic_message(reply, ctx)
        elif dialect == OPENAI_CHAT:
            obj = render.chat_completion(reply, ctx)
        else:
            obj = render.response_object(reply, ctx, done=True)
        rec.status = 200
        rec.error = fault
        return json_response(200, obj, headers, cut=fault == "cut_stream")
    if dialect == ANTHROPIC:
        events = render.anthropic_events(reply, ctx)
    elif dialect == OPENAI_CHAT:
        events = render.chat_chunks(reply, ctx)
    else:
        events = render.responses_events(reply, ctx)
    rec.status = 200
    assert isinstance(entry, Fault) or fault is None
    if isinstance(entry, Fault) and fault == "cut_stream":
        rec.error = "cut_stream"
        return sse_response(events, headers, cut_after=entry.after_events)
    if isinstance(entry, Fault) and fault == "stream_error":
        if dialect == ANTHROPIC:
            tail = render.anthropic_stream_error(rid)
        elif dialect == OPENAI_CHAT:
            tail = render.chat_stream_error()
        else:
            tail = render.responses_stream_error()
        rec.error = "stream_error"
        return sse_response([*events[: entry.after_events], tail], headers)
    return sse_response(events, headers)
