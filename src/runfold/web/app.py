"""The app and the router: `web_router(workspace_dir, actions=...)` gathers the pages, the live
tail and the actions into one `APIRouter` any FastAPI server includes (at any prefix);
`create_app(...)` wraps it into the app `runfold view` serves, with the access check of
`runfold.web.security`.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.web.actions import LocalActions, WebActions
from runfold.web.security import COOKIE, Guard
from runfold.web.site import Site


def web_router(
    workspace_dir: Path,
    *,
    actions: WebActions | None = None,
    prefix: str = "",
    guard: Guard | None = None,
) -> APIRouter:
    """The pages over the workspace at `workspace_dir` as one router, to include at `prefix`
    (`app.include_router(web_router(ws, prefix="/ui"), prefix="/ui")`). `actions` answers the
    forms (default: `LocalActions`, acting as the CLI does); `guard` holds the CSRF token
    (default: a new one). Raises `E_PATH_NOT_FOUND` when no workspace is there."""
    return _router(_site(workspace_dir, actions, guard or Guard(), prefix))


def _site(workspace_dir: Path, actions: WebActions | None, guard: Guard, prefix: str) -> Site:
    root = Path(workspace_dir)
    return Site(root, actions if actions is not None else LocalActions(root), guard, prefix)


def _router(site: Site) -> APIRouter:
    from runfold.web import live, pages, requests

    router = APIRouter()
    pages.add_routes(router, site)
    requests.add_routes(router, site)
    live.add_routes(router, site)
    return router


def create_app(workspace_dir: Path, *, actions: WebActions | None = None, guard: Guard | None = None) -> FastAPI:
    """The app `runfold view` serves: the router at `/` behind the access check (`guard.token`
    None: no token asked, for loopback). `GET /login?code=...` spends the one-time code and sets
    the access cookie. Raises like `web_router`."""
    guard = guard or Guard()
    site = _site(workspace_dir, actions, guard, "")
    app = FastAPI(title="runfold view", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(_router(site))
    _friendly_http_errors(app, site)

    @app.get("/login", include_in_schema=False)
    def login(code: str = "") -> Response:
        if guard.token is None:
            return RedirectResponse("/", status_code=303)
        if not guard.spend_login(code):
            return PlainTextResponse(
                "this login link was already used or is wrong: ask for a new one (restart `runfold view`), "
                "or send the token from .runfold/view-token as `Authorization: Bearer TOKEN`",
                status_code=403,
            )
        resp = RedirectResponse("/", status_code=303)
        resp.set_cookie(COOKIE, guard.token, httponly=True, samesite="strict")
        return resp

    app.add_middleware(_Gate, guard=guard)
    return app


def _friendly_http_errors(app: FastAPI, site: Site) -> None:
    """Answer the requests no page takes with the site's error page in the DESIGN §11 shape,
    never the framework's JSON: an unknown address (404), a method the address does not take
    (405), a query or form value of the wrong type (400, naming the parameter) and a form field
    over the size limit (400)."""

    @app.exception_handler(RequestValidationError)
    async def bad_value(request: Request, exc: RequestValidationError) -> Response:
        problems = []
        for err in exc.errors()[:4]:
            loc = [str(x) for x in err.get("loc", ()) if x not in ("query", "path", "body")]
            given = err.get("input")
            shown = "" if given is None or isinstance(given, dict) else f" {str(given)[:40]!r}"
            problems.append(f"{'.'.join(loc) or 'a value'}{shown}: {err.get('msg', 'invalid')}")
        refusal = invalid_args(
            f"read the request's parameters ({'; '.join(problems)})",
            request.url.path[:200],
            "give each parameter as the page's links and forms do (a seq is a whole number ≥ 0)",
        )
        return site.error(request, refusal, http_status=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path[:200]
        if exc.status_code == 404:
            refusal = RunfoldError(
                ErrorCode.PATH_NOT_FOUND, "show this address", path, "no page has it; start from the runs at /"
            )
        elif exc.status_code == 405:
            refusal = invalid_args(
                f"{request.method} this address", path, "it answers the forms of a run's page; open the run's page"
            )
        else:
            refusal = invalid_args("read the request", path, f"{exc.detail}; send a smaller form")
        return site.error(request, refusal, http_status=exc.status_code)


class _Gate:
    """ASGI middleware: a request without the access token gets 401 (`/login` excepted); a
    plain ASGI class, so the live tail's stream is passed through untouched."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if not self.guard.host_ok(request):
            await PlainTextResponse(
                "this server answers only to its own address (the Host header names another): open it by "
                "the URL `runfold view` printed",
                status_code=421,
            )(scope, receive, send)
            return
        if request.url.path == "/login" or self.guard.allowed(request):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "this server asks for its access token: open the login link `runfold view` printed, "
            "or send `Authorization: Bearer TOKEN` (the token is in .runfold/view-token)",
            status_code=401,
        )
        await response(scope, receive, send)
