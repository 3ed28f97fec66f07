"""The web page (`runfold.web`) served by `runfold serve` beside its API: the same pages as
`runfold view`, whose actions — steer, cancel, fork, continue, approve or deny a waiting call —
go through the serving owner (`RunOwner`), as the API and the CLI's handover do, never by opening
the ledger themselves.

The pages keep their own checks: the `Host` header on loopback (DNS rebinding), the serve token
(bearer, or the cookie a one-time login link sets) when the server asks for one, and the page's
same-origin CSRF token on every action.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from anyio import from_thread
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from runfold.core.errors import ErrorCode, Retry, RunfoldError
from runfold.server.app import error_json
from runfold.server.owner import RunOwner
from runfold.web import create_app
from runfold.web.actions import Done, action_error
from runfold.web.security import Guard

T = TypeVar("T")

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


class OwnerActions:
    """`WebActions` through the serving `owner`. The page's handlers run in worker threads;
    each action runs on the owner's event loop (`anyio.from_thread`), as an API call does."""

    def __init__(self, owner: RunOwner) -> None:
        self.owner = owner

    def _on_loop(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        try:
            return from_thread.run(fn)
        except RunfoldError as exc:
            raise action_error(exc) from None

    def _control(self, run: str, type: str, text: str = "", call: str = "") -> Done:
        async def go() -> Done:
            rid = self.owner.resolve(run)
            ans = await self.owner.control(rid, type, text, call=call)
            what = {"steer": "steer", "cancel": "cancel", "approve": f"approval of call {call}", "deny": f"denial of call {call}"}[type]
            if ans["state"] == "dropped":
                return Done(f"{what}: run {rid} was still queued and is dropped (it never runs)", rid)
            landed = f"recorded at seq {ans['seq']}" if ans.get("seq") is not None else "it lands at the run's next safe point"
            return Done(f"{what} {ans['state']} by the server's run {rid} as {ans['signal']}; {landed}", rid)

        return self._on_loop(go)

    def steer(self, run: str, text: str) -> Done:
        return self._control(run, "steer", text)

    def cancel(self, run: str) -> Done:
        return self._control(run, "cancel")

    def decide(self, run: str, call: str, approve: bool, reason: str) -> Done:
        return self._control(run, "approve" if approve else "deny", reason, call)

    def fork(self, run: str, at: int, task: str | None) -> Done:
        async def go() -> Done:
            rid = self.owner.resolve(run, ledger_only=True)
            plan = await self.owner.fork(rid, at, task)
            moved = f" (the cut moved from seq {plan.asked}: {plan.moved})" if plan.moved else ""
            return Done(
                f"forked {plan.new_run} from {plan.mother} at seq {plan.cut}{moved}; "
                f"inherited {len(plan.inherited.messages)} message(s); not started — continue it to run it",
                plan.new_run,
            )

        return self._on_loop(go)

    def continue_run(self, run: str, model: str | None, task: str | None) -> Done:
        async def go() -> Done:
            rid = self.owner.resolve(run, ledger_only=True)
            request: dict[str, Any] = {"continues": rid, "task": task or "", **({"model": model} if model else {})}
            h = await self.owner.dispatch(request)
            return Done(
                f"continuing {rid} as run {h.run} in this server ({h.state}"
                f"{', model ' + model if model else ''})",
                h.run,
            )

        return self._on_loop(go)


class _BesideApi:
    """The pages' app, except under the API's prefix: a path there that no API route took gets
    the API's own error shape (404), not a page."""

    def __init__(self, pages: ASGIApp, api_prefix: str) -> None:
        self.pages = pages
        self.api_prefix = api_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (path == self.api_prefix or path.startswith(self.api_prefix + "/")):
            err = RunfoldError(
                ErrorCode.PATH_NOT_FOUND,
                "serve the request (no API route has this path)",
                path[:200],
                f"see {self.api_prefix}/docs for the routes",
                retry=Retry.NO,
            )
            await JSONResponse(error_json(err), status_code=404)(scope, receive, send)
            return
        await self.pages(scope, receive, send)


def mount_pages(
    app: FastAPI, owner: RunOwner, *, token: str | None, host: str, loopback: bool, api_prefix: str
) -> Guard:
    """Mount the web pages over `owner`'s workspace at `/` of `app` (after the API's routes),
    acting through `owner`. `token` (None: none asked) is the serve token the pages ask for too;
    on a `loopback` `host` the pages answer only to loopback host names and `host`. Returns the
    pages' guard (its `login_code` is the one-time login link's, when a token is asked)."""
    guard = Guard(
        token=token,
        login_code=secrets.token_urlsafe(16) if token is not None else None,
        hosts=(LOOPBACK_NAMES | {host.strip("[]").lower()}) if loopback else None,
    )
    pages = create_app(owner.ws.root, actions=OwnerActions(owner), guard=guard)
    app.mount("/", _BesideApi(pages, api_prefix), name="pages")
    return guard


__all__ = ["OwnerActions", "mount_pages"]
