"""Which store keeps a workspace's ledger, and the one place that opens it (DESIGN.md §3 "Storage").

A workspace's `.runfold/config.toml` may name a server store with a top-level
`store = "postgresql://…"`; without it the ledger is the embedded file ledger under `.runfold/`.
`open_ledger` and `create_ledger` are the only constructors the rest of runfold calls, so every
command works on either backend through the `LedgerWriter` shape.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.store.layout import Layout
from runfold.store.view import LedgerWriter

STORE_KEY = "store"
"""The top-level key of `.runfold/config.toml` naming the ledger's store."""
SCHEMES = ("postgresql", "postgres")
"""URL schemes of the PostgreSQL store (libpq accepts both)."""
WORKSPACE_PARAM = "workspace"
"""The URL query parameter naming the workspace inside the database (default `default`)."""
DEFAULT_NAME = "default"
_NAME_MAX = 200
_PASSWORD = re.compile(r"^([^:/]+://[^:/@]*:)[^/]*@")


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed PostgreSQL store: `conninfo` is the URL libpq connects with (our `workspace`
    parameter removed), `name` the workspace's key in the database, `shown` the URL without its
    password (for messages and reports)."""

    conninfo: str
    name: str
    shown: str


def _bad_url(url: str, why: str, where: str) -> RunfoldError:
    return RunfoldError(
        ErrorCode.CONFIG_INVALID,
        f"read the store URL ({why})",
        where,
        'give `store = "postgresql://USER@HOST/DATABASE?workspace=NAME"` (a libpq URL; host may be '
        "a unix socket directory as `?host=/run/postgresql`), or remove the key to keep the file ledger",
    )


def parse_store_url(url: object, where: str = "store") -> StoreUrl:
    """Check a store URL: a string `postgresql://…` (or `postgres://…`) with an optional
    `workspace=NAME` query parameter (1–200 printable characters, default `default`).

    Raises `E_CONFIG_INVALID` naming `where` (e.g. the config file and key) and the fault.
    """
    if not isinstance(url, str) or not url:
        raise _bad_url(repr(url), "not a non-empty string", where)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed [ of an IPv6 host
        raise _bad_url(_hide(url), f"it does not parse: {exc}", where) from None
    if parts.scheme not in SCHEMES:
        raise _bad_url(_hide(url), f"scheme {parts.scheme or '(none)'!r} is not postgresql", where)
    if parts.fragment:
        raise _bad_url(_hide(url), "a URL fragment (#…) is not allowed", where)
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise _bad_url(_hide(url), "the query string does not parse", where) from None
    names = [v for k, v in query if k == WORKSPACE_PARAM]
    if len(names) > 1:
        raise _bad_url(_hide(url), "`workspace` given more than once", where)
    name = names[0] if names else DEFAULT_NAME
    if not 0 < len(name) <= _NAME_MAX or not name.isprintable():
        raise _bad_url(
            _hide(url), f"workspace name {name!r} must be 1-{_NAME_MAX} printable characters", where
        )
    rest = urlencode([(k, v) for k, v in query if k != WORKSPACE_PARAM])
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, ""))
    return StoreUrl(conninfo=conninfo, name=name, shown=_hide(url))


def with_workspace(url: StoreUrl, name: str) -> str:
    """The URL of workspace `name` in the same database as `url` (its password kept, for the
    settings file). Raises `E_CONFIG_INVALID` for a name `parse_store_url` would refuse."""
    parts = urlsplit(url.conninfo)
    query = "&".join(q for q in (parts.query, urlencode([(WORKSPACE_PARAM, name)])) if q)
    out = urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    parse_store_url(out, f"workspace {name!r}")
    return out


def _hide(url: str) -> str:
    """`url` with the password of its netloc replaced by `***` (for a URL that does not parse,
    whatever follows `user:` up to the last `@`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _PASSWORD.sub(r"\1***@", url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def store_setting(ws: Path) -> StoreUrl | None:
    """The store named by `<ws>/.runfold/config.toml` (its top-level `store` key), or None for
    the file ledger (no file, no key). Raises `E_CONFIG_INVALID` naming the file for TOML that
    does not parse or a bad URL (the full file is checked by `runtime.config.load_config`)."""
    path = Layout(Path(ws)).root / "config.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID, f"read the settings ({exc})", str(path), "fix or remove the file"
        ) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID, f"parse the settings ({exc})", str(path), "fix the TOML syntax"
        ) from None
    if STORE_KEY not in doc:
        return None
    return parse_store_url(doc[STORE_KEY], f"{path}: {STORE_KEY}")


def open_ledger(ws: Path, *, writer: bool) -> LedgerWriter:
    """Open the ledger of workspace `ws` in the store its settings name (the file ledger by
    default), as a reader or as the one writer. Raises like `Ledger.open` / `PgLedger.open`,
    and `E_CONFIG_INVALID` for a bad store setting or a missing `postgres` extra."""
    url = store_setting(ws)
    if url is None:
        from runfold.store.ledger import Ledger

        return Ledger.open(ws, writer=writer)
    from runfold.store.pg import PgLedger

    return PgLedger.open(url, ws, writer=writer)


def create_ledger(ws: Path, url: StoreUrl | None = None) -> LedgerWriter:
    """Create the ledger of a new workspace `ws` (its `.runfold/` directory) in `url`'s store,
    or as files when `url` is None, and return its writer after `workspace_initialized`.
    Raises `E_INVALID_ARGS` when the store already holds that workspace's lines."""
    if url is None:
        from runfold.store.ledger import Ledger

        return Ledger.create(ws)
    from runfold.store.pg import PgLedger

    return PgLedger.create(url, ws)


def writer_alive(ws: Path) -> bool:
    """Whether a live process holds the writer of workspace `ws` (the file lock, or the
    database lease of a PostgreSQL store)."""
    url = store_setting(ws)
    if url is None:
        from runfold.store.locks import lock_held

        return lock_held(Layout(Path(ws)).lock_path)
    from runfold.store.pg import lease_held

    return lease_held(url)


def join_or_create(ws: Path, url: StoreUrl) -> bool:
    """Make `url`'s workspace the ledger of the local workspace directory `ws`: when the store
    holds no line for it yet, create it (seq 0 `workspace_initialized`) and return True; when it
    holds lines, join it (write nothing) and return False. Raises like `PgLedger.open`."""
    from runfold.store.pg import PgLedger

    with PgLedger.open(url, ws, writer=False) as reader:
        if reader.next_seq > 0:
            return False
    PgLedger.create(url, ws).close()
    return True
