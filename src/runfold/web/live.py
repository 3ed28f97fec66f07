"""The live tail and the actions. The tail is Server-Sent Events over the ledger: each read opens
a fresh reader (readers need no lock) and sends the lines past the last one sent, in seq order,
each with its seq as the event id, so a reconnect (`Last-Event-ID`) resumes where it stopped and
nothing already shown is ever reordered. A workspace whose ledger is in PostgreSQL is read again
when the writer's NOTIFY says lines were committed (`runfold.store.follow.line_waiter`); a file
ledger is polled. The actions (steer, cancel, fork, continue, approve or deny a waiting call)
are form posts that need the page's CSRF token and a same-origin request; they call the site's
`WebActions`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Protocol

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from runfold.core.records import Record
from runfold.store.backend import store_setting
from runfold.store.follow import LineWait, line_waiter
from runfold.web.actions import ActionError, Done
from runfold.web.site import Site, friendly
from runfold.web.viewer import Viewer, row_of

POLL_S = 0.25
"""How often the tail looks for new lines of a file ledger."""
NOTIFY_WAIT_S = 1.0
"""How long the tail of a PostgreSQL-backed workspace waits for a NOTIFY before it checks that
its client is still connected (a NOTIFY ends the wait at once)."""
BATCH = 500
KEEPALIVE_S = 15.0


class Connection(Protocol):
    """What the tail needs of its request: whether the client went away."""

    async def is_disconnected(self) -> bool: ...


def _read(viewer: Viewer, run: str | None, since: int) -> tuple[list[Record], int]:
    """Up to `BATCH` lines (of `run`, when given) from seq `since`, and the ledger's next seq."""
    with viewer.open() as ws:
        stop = ws.seq_range().stop
        if since >= stop:
            return [], stop
        return ws.records(run=run, since=since, limit=BATCH), stop


def _notified(viewer: Viewer) -> LineWait | None:
    """The LISTEN/NOTIFY waiter of a PostgreSQL-backed workspace; None for a file ledger (or a
    bare ledger file), which is polled."""
    if not viewer.root.is_dir() or store_setting(viewer.root) is None:
        return None
    return line_waiter(viewer.root).waiter


async def tail_events(viewer: Viewer, request: Connection, run: str | None, since: int) -> AsyncIterator[str]:
    """The Server-Sent Events of the tail: `retry`, then one `line` event per line (of `run`,
    when given) from seq `since` on, in seq order with its seq as the id, until the client goes
    away; a keep-alive comment after `KEEPALIVE_S` s without a line; a `failed` event naming the
    error that stops it (a damaged line, the database gone)."""
    yield "retry: 1000\n\n"
    next_seq = since
    quiet_since = time.monotonic()
    waiter: LineWait | None = None
    try:
        waiter = await run_in_threadpool(_notified, viewer)
        while not await request.is_disconnected():
            try:
                batch, stop = await run_in_threadpool(_read, viewer, run, next_seq)
            except Exception as exc:  # the page says why the tail stopped, and it stops
                yield f"event: failed\ndata: {json.dumps(str(exc))}\n\n"
                return
            for rec in batch:
                if rec.seq < next_seq:
                    continue  # never send a line twice, never out of order
                data = json.dumps(row_of(rec).to_data(), ensure_ascii=False)
                yield f"id: {rec.seq}\nevent: line\ndata: {data}\n\n"
                next_seq = rec.seq + 1
            if batch:
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since >= KEEPALIVE_S:
                quiet_since = time.monotonic()
                yield ": keepalive\n\n"
            if waiter is None:
                await asyncio.sleep(POLL_S)
                continue
            try:  # until a line past the ledger's head is committed, or the wait's time is up
                await run_in_threadpool(waiter.wait, stop, NOTIFY_WAIT_S)
            except Exception as exc:
                yield f"event: failed\ndata: {json.dumps(str(exc))}\n\n"
                return
    except Exception as exc:  # the store could not be reached to listen
        yield f"event: failed\ndata: {json.dumps(str(exc))}\n\n"
    finally:
        if waiter is not None:
            waiter.close()


def _start(request: Request, since: int | None) -> int:
    last = request.headers.get("last-event-id", "").strip()
    if last.isdigit():
        return int(last) + 1
    return max(since or 0, 0)


def add_routes(router: APIRouter, site: Site) -> None:
    """Add the live tail and the action posts to `router`."""
    viewer = site.viewer

    def sse(request: Request, run: str | None, since: int) -> StreamingResponse:
        return StreamingResponse(
            tail_events(viewer, request, run, since),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @router.get("/tail", name="tail")
    async def tail(request: Request, since: int | None = None) -> Response:
        return sse(request, None, _start(request, since))

    @router.get("/runs/{run}/tail", name="run_tail")
    async def run_tail(request: Request, run: str, since: int | None = None) -> Response:
        try:
            with viewer.open() as ws:
                rid = ws.resolve_run(run)
        except Exception as exc:
            return site.error(request, exc)
        return sse(request, rid, _start(request, since))

    # ---- actions -------------------------------------------------------------------------

    def act(request: Request, run: str, token: str, what: str, do: object) -> Response:
        if not site.guard.same_origin(request, token):
            return site.render(
                request,
                "action.html",
                http_status=403,
                title="refused",
                run=run,
                ok=False,
                message=f"refused to {what}: the form's token is missing or stale, or the request came from "
                "another site; reload the run's page and try again",
                next_run=None,
            )
        try:
            assert callable(do)
            done = do()
            assert isinstance(done, Done)
        except ActionError as exc:
            return site.render(
                request, "action.html", http_status=exc.status, title="refused", run=run, ok=False,
                message=exc.message, next_run=None,
            )
        return site.render(
            request, "action.html", title=what, run=run, ok=True, message=done.message, next_run=done.run
        )

    @router.post("/runs/{run}/steer", name="steer")
    @friendly(site)
    def steer(request: Request, run: str, csrf: Annotated[str, Form()] = "", text: Annotated[str, Form()] = "") -> Response:
        return act(request, run, csrf, "steer the run", lambda: site.actions.steer(run, text))

    @router.post("/runs/{run}/cancel", name="cancel")
    @friendly(site)
    def cancel(request: Request, run: str, csrf: Annotated[str, Form()] = "") -> Response:
        return act(request, run, csrf, "cancel the run", lambda: site.actions.cancel(run))

    @router.post("/runs/{run}/fork", name="fork")
    @friendly(site)
    def fork(
        request: Request,
        run: str,
        csrf: Annotated[str, Form()] = "",
        at: Annotated[int, Form()] = -1,
        task: Annotated[str, Form()] = "",
    ) -> Response:
        return act(request, run, csrf, "fork the run", lambda: site.actions.fork(run, at, task.strip() or None))

    @router.post("/runs/{run}/decide", name="decide")
    @friendly(site)
    def decide(
        request: Request,
        run: str,
        csrf: Annotated[str, Form()] = "",
        call: Annotated[str, Form()] = "",
        decision: Annotated[str, Form()] = "",
        reason: Annotated[str, Form()] = "",
    ) -> Response:
        if decision not in ("approve", "deny") or not call.strip():
            return site.render(
                request, "action.html", http_status=400, title="refused", run=run, ok=False,
                message=f"E_INVALID_ARGS: cannot decide call {call[:80]!r} (decision {decision[:20]!r}) — "
                "press approve or deny beside a waiting call on the run's page",
                next_run=None,
            )
        what = f"{decision} call {call}"
        return act(
            request, run, csrf, what,
            lambda: site.actions.decide(run, call.strip(), decision == "approve", reason.strip()),
        )

    @router.post("/runs/{run}/continue", name="continue")
    @friendly(site)
    def continue_run(
        request: Request,
        run: str,
        csrf: Annotated[str, Form()] = "",
        model: Annotated[str, Form()] = "",
        task: Annotated[str, Form()] = "",
    ) -> Response:
        return act(
            request,
            run,
            csrf,
            "continue the run",
            lambda: site.actions.continue_run(run, model.strip() or None, task.strip() or None),
        )
