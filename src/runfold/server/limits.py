"""A ceiling on request bodies: a body longer than the ceiling is answered 413 in runfold's error
shape before any route acts on it, so a 30 MB task never reaches a run or the ledger.

A plain ASGI middleware (Starlette's own body limit answers a declared `Content-Length` past the
ceiling with a plain-text body, whatever the app's handlers say): it refuses a declared length up
front and counts the bytes of a body sent without one (chunked) as they arrive; the refused
bytes are read and dropped, so the client gets its answer rather than a reset connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from starlette.exceptions import HTTPException

from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.core.figures import count

DEFAULT_MAX_BODY = 1024 * 1024
"""Bytes a request body may hold by default (1 MiB, `--max-body`): far above any task or steer a
person types, far below what would let one request fill the ledger or the server's memory."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTooLarge(HTTPException):
    """Raised inside `receive` once a body without `Content-Length` passes the ceiling: an HTTP
    413, so a route reading its body lets it through to the app's handler of HTTP errors."""

    def __init__(self) -> None:
        super().__init__(status_code=413, detail="the request body passes the ceiling")


def too_large(limit: int) -> RunfoldError:
    """The 413 answer to a request body longer than `limit` bytes."""
    return RunfoldError(
        ErrorCode.INVALID_ARGS,
        f"read a request body longer than {count(limit)} bytes (the server's ceiling)",
        "the request body",
        f"send at most {count(limit)} bytes (put long material in a file of the workspace and name it), "
        "or start the server with a larger --max-body",
        retry=Retry.NO,
    )


class BodyLimit:
    """ASGI middleware answering 413 to an HTTP request whose body passes `limit` bytes (≥ 1);
    `render` turns the error into the JSON body (the API's error shape)."""

    def __init__(self, app: App, *, limit: int, render: Callable[[RunfoldError], dict[str, Any]]) -> None:
        self.app = app
        self.limit = limit
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _drain(receive, more=True)
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    await _drain(receive, more=bool(message.get("more_body")))
                    raise BodyTooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:
                raise
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = orjson.dumps(self.render(too_large(self.limit)))
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive, *, more: bool) -> None:
    """Read the rest of a refused body and drop it, chunk by chunk (nothing is kept), so the
    client that is still sending it reads the 413 instead of a reset connection."""
    while more:
        message = await receive()
        more = message.get("type") == "http.request" and bool(message.get("more_body"))


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


__all__ = ["DEFAULT_MAX_BODY", "BodyLimit", "BodyTooLarge", "too_large"]
