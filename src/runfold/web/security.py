"""Who may see the pages and who may act: a loopback server serves anyone on this machine; a
server on any other address asks for the access token (a bearer token, or a cookie set from a
one-time login URL). Every action also needs the page's same-origin CSRF token.

The access token is kept in `<workspace>/.runfold/view-token`, mode 0600, made on first need.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request

TOKEN_FILE = "view-token"
COOKIE = "runfold_view"
CSRF_FIELD = "csrf"


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def access_token(root: Path) -> str:
    """The workspace's access token: read from `.runfold/view-token`, or made (32 random bytes,
    URL-safe) and written with mode 0600 when missing."""
    path = root / ".runfold" / TOKEN_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
        if text:
            os.chmod(path, 0o600)
            return text
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return token


@dataclass
class Guard:
    """The server's secrets: the access `token` (None: loopback, no token asked), the one-time
    `login_code` of the login URL (spent on first use) and the `csrf` token of the forms."""

    token: str | None = None
    login_code: str | None = None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    hosts: frozenset[str] | None = None
    """The host names a request's `Host` may give (None: any). A loopback server sets them, so a
    page of another site cannot read it through a name that resolves to 127.0.0.1 (DNS rebinding)."""

    def host_ok(self, request: Request) -> bool:
        """True when the request's `Host` (without its port) is one of `hosts`, or none are set."""
        if self.hosts is None:
            return True
        host = request.headers.get("host", "")
        name = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        return name.lower() in self.hosts

    def allowed(self, request: Request) -> bool:
        """True when `request` carries the access token (or none is asked)."""
        if self.token is None:
            return True
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and secrets.compare_digest(auth[7:].strip(), self.token):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and secrets.compare_digest(cookie, self.token)

    def spend_login(self, code: str) -> bool:
        """True once for the right one-time code; the code is then spent."""
        if self.login_code is None or not secrets.compare_digest(code, self.login_code):
            return False
        self.login_code = None
        return True

    def same_origin(self, request: Request, form_token: str) -> bool:
        """True when the form carries this page's CSRF token and the request, if it names an
        origin (`Origin`, else `Referer`), comes from this server's own host."""
        if not form_token or not secrets.compare_digest(form_token, self.csrf):
            return False
        origin = request.headers.get("origin") or request.headers.get("referer")
        if not origin or origin == "null":
            return origin is None
        host = request.headers.get("host", "")
        rest = origin.split("://", 1)[-1]
        return rest.split("/", 1)[0] == host
