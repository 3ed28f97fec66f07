"""What every page shares: the viewer, the actions, the guard, the URL prefix the router is
mounted at, and one way to render a template or a friendly error page (never a stack trace).
Templates are Jinja2 with autoescape on: every text from the ledger is escaped.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from runfold import __version__
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.web.actions import WebActions
from runfold.web.security import CSRF_FIELD, Guard
from runfold.web.viewer import Viewer

HERE = Path(__file__).parent
P = ParamSpec("P")
log = logging.getLogger("runfold.web")

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"
    ),
}
"""Sent with every page: scripts and styles only from this server, no inline script runs."""

_NOT_FOUND = (ErrorCode.INVALID_ARGS, ErrorCode.PATH_NOT_FOUND)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["usd"] = lambda micros: "unknown" if micros is None else f"${micros / 1e6:,.4f}"
    env.filters["num"] = lambda n: "unknown" if n is None else f"{n:,}"
    env.filters["short"] = lambda run, names=None: (names or {}).get(run, run[:8] if run else "")
    env.filters["pretty"] = lambda raw: json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    return env


@dataclass
class Site:
    """The shared state of one router (see the module docstring)."""

    root: Path
    actions: WebActions
    guard: Guard
    prefix: str = ""
    viewer: Viewer = field(init=False)
    env: jinja2.Environment = field(init=False)

    def __post_init__(self) -> None:
        self.viewer = Viewer(self.root)
        self.root = self.viewer.root
        self.env = _environment()

    def base(self, request: Request) -> str:
        """The URL path the router's routes start at (the app's root path plus the prefix)."""
        return str(request.scope.get("root_path", "")).rstrip("/") + self.prefix.rstrip("/")

    def render(self, request: Request, template: str, http_status: int = 200, **values: Any) -> HTMLResponse:
        """The page `template` with `values`, the base path, the CSRF token and the workspace."""
        html = self.env.get_template(template).render(
            base=self.base(request),
            csrf=self.guard.csrf,
            csrf_field=CSRF_FIELD,
            root=str(self.root),
            version=__version__,
            request_path=request.url.path,
            **values,
        )
        return HTMLResponse(html, status_code=http_status, headers=SECURITY_HEADERS)

    def error(self, request: Request, exc: BaseException, http_status: int | None = None) -> HTMLResponse:
        """A friendly page for an error: 404 for a run or seq that does not exist (with the
        alternatives the error names), 409 for a refusal, 500 for runfold's own bug;
        `http_status` overrides the status of a `RunfoldError` (400 for a malformed request)."""
        if isinstance(exc, RunfoldError):
            status = http_status or (404 if exc.code in _NOT_FOUND else 409)
            return self.render(
                request,
                "error.html",
                http_status=status,
                title="not found" if status == 404 else exc.code.value,
                message=exc.display(),
                nearby=list(exc.nearby),
            )
        log.exception("page %s failed", request.url.path)
        return self.render(
            request,
            "error.html",
            http_status=500,
            title="E_INTERNAL",
            message=f"E_INTERNAL: cannot show {request.url.path} — runfold's own bug ({type(exc).__name__}: {exc}); "
            "run the same view with the CLI (`runfold log`, `runfold show`) and report it",
            nearby=[],
        )


def friendly(site: Site) -> Callable[[Callable[P, Response]], Callable[P, Response]]:
    """Wrap a page handler (its `request` passed by keyword) so that any error becomes the
    site's error page. Handlers are plain functions: FastAPI runs them in its thread pool, so a
    page reading the ledger never blocks the live tail."""

    def wrap(handler: Callable[P, Response]) -> Callable[P, Response]:
        @functools.wraps(handler)
        def inner(*args: P.args, **kwargs: P.kwargs) -> Response:
            try:
                return handler(*args, **kwargs)
            except Exception as exc:
                request = kwargs.get("request")
                assert isinstance(request, Request)
                return site.error(request, exc)

        return inner

    return wrap
