"""The files of a workspace's serving owner (`runfold serve`): where it listens, its bearer token
and the dispatches it accepted but has not started (DESIGN.md §3 "one writer per workspace").

`<ws>/.runfold/serve/serve.json` says where the owner listens (pid, URL, token file); it is
believed only while that pid holds the writer lock, so a file a killed server left names nobody.
`queue/<run>.json` holds each dispatch accepted past the limit of concurrent runs, written
durably before the dispatch is acknowledged, so a queued run survives a crash; a queued run whose
id already has lines in the ledger has started and is never started again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.ids import is_run_id
from runfold.store.durable import replace_durably
from runfold.store.layout import Layout
from runfold.store.locks import lock_held

TOKEN_BYTES = 32
"""Random bytes in a generated bearer token (shown as URL-safe base64, 43 characters)."""


def serve_dir(ws: Path) -> Path:
    """`<ws>/.runfold/serve`."""
    return Layout(ws).root / "serve"


def info_path(ws: Path) -> Path:
    """`<ws>/.runfold/serve/serve.json`: where the serving owner listens."""
    return serve_dir(ws) / "serve.json"


def token_path(ws: Path) -> Path:
    """`<ws>/.runfold/serve/token`: the bearer token (mode 0600)."""
    return serve_dir(ws) / "token"


def queue_dir(ws: Path) -> Path:
    """`<ws>/.runfold/serve/queue`: dispatches accepted and not started."""
    return serve_dir(ws) / "queue"


@dataclass(frozen=True)
class ServeInfo:
    """Where a serving owner listens: its `pid`, base `url` (`http://host:port`), `host`, `port`,
    `token_file` (None: the server asks for no token) and `started_ms` (UTC ms)."""

    pid: int
    url: str
    host: str
    port: int
    token_file: str | None
    started_ms: int

    def to_json(self) -> bytes:
        return orjson.dumps(self.__dict__, option=orjson.OPT_INDENT_2)

    def token(self) -> str | None:
        """The bearer token read from `token_file`, None when there is none or it is unreadable."""
        if self.token_file is None:
            return None
        try:
            return Path(self.token_file).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None


def write_info(ws: Path, info: ServeInfo) -> None:
    """Write `serve.json` durably (the serve directory is created when missing)."""
    serve_dir(ws).mkdir(parents=True, exist_ok=True)
    replace_durably(info_path(ws), info.to_json())


def remove_info(ws: Path, pid: int) -> None:
    """Remove `serve.json` when it names `pid` (a later server's file is left alone)."""
    info = read_info(ws)
    if info is not None and info.pid == pid:
        with contextlib.suppress(OSError):
            info_path(ws).unlink()


def read_info(ws: Path) -> ServeInfo | None:
    """`serve.json` as written, None when absent or not readable as one."""
    try:
        obj = orjson.loads(info_path(ws).read_bytes())
        return ServeInfo(
            pid=int(obj["pid"]),
            url=str(obj["url"]),
            host=str(obj["host"]),
            port=int(obj["port"]),
            token_file=None if obj.get("token_file") is None else str(obj["token_file"]),
            started_ms=int(obj.get("started_ms", 0)),
        )
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def find_server(ws: Path) -> ServeInfo | None:
    """The serving owner of workspace `ws`, or None: `serve.json` counts only while a live
    process holds the writer lock and the pid written in the lock is the file's pid."""
    info = read_info(ws)
    if info is None:
        return None
    lock = Layout(ws).lock_path
    if not lock_held(lock):
        return None
    try:
        holder = lock.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return info if holder == str(info.pid) else None


def held_recovery(ws: Path, holder: str) -> str:
    """The recovery sentence of `E_LEDGER_HELD` when pid `holder` holds the writer lock of `ws`:
    a serving owner takes runs over HTTP; another process is waited for, or replaced by one."""
    info = read_info(ws)
    if info is not None and str(info.pid) == holder:
        return (
            f"`runfold serve` (pid {holder}, {info.url}) owns this workspace: `runfold run`, `continue`, "
            "`fork`, `steer` and `cancel` hand their work to it; stop it (Ctrl-C) for other commands that write"
        )
    return (
        f"another runfold process (pid {holder}) is writing this workspace; wait for it to finish or stop it, then "
        "retry (readers need no lock); to run several agents at once, start `runfold serve` here: runs go to it"
    )


def new_token(ws: Path) -> Path:
    """Generate a fresh bearer token into `token_path(ws)` with mode 0600 (replacing one);
    returns its path."""
    serve_dir(ws).mkdir(parents=True, exist_ok=True)
    path = token_path(ws)
    replace_durably(path, (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode(), mode=0o600)
    os.chmod(path, 0o600)
    return path


def read_token(path: Path) -> str:
    """The token in `path`. Raises `E_INVALID_ARGS` when the file is missing, empty, or readable
    by anyone but its owner (mode wider than 0600), naming the fix."""
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise invalid_args(
            f"read the bearer token ({exc.strerror or exc})",
            str(path),
            "generate one with `runfold serve --new-token`, or give --token-file FILE",
        ) from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise invalid_args(
            f"read the bearer token (mode {stat.S_IMODE(st.st_mode):o}: others may read it)",
            str(path),
            f"make it private: `chmod 600 {path}`",
        )
    if not text:
        raise invalid_args("read the bearer token (the file is empty)", str(path), "generate one with `runfold serve --new-token`")
    return text


# ---- the queue -------------------------------------------------------------------------------


def queue_put(ws: Path, run: str, request: dict[str, Any]) -> None:
    """Record the dispatch `request` (JSON object) of the not-yet-started run `run` durably."""
    d = queue_dir(ws)
    d.mkdir(parents=True, exist_ok=True)
    try:
        replace_durably(d / f"{run}.json", orjson.dumps(request))
    except OSError as exc:
        raise RunfoldError(
            ErrorCode.STORAGE_FATAL,
            f"queue the run ({exc.strerror or exc})",
            str(d),
            "free disk space or fix the storage error, then dispatch the run again",
        ) from None


def queue_drop(ws: Path, run: str) -> None:
    """Forget the queued dispatch of `run` (a no-op when there is none)."""
    with contextlib.suppress(OSError):
        (queue_dir(ws) / f"{run}.json").unlink()


def queue_items(ws: Path) -> list[tuple[str, dict[str, Any] | None]]:
    """Every queued dispatch as (run id, request; None when unreadable) in dispatch order (run
    ids are UUIDv7, minted when the dispatch was accepted)."""
    d = queue_dir(ws)
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".json") and not n.startswith("."))
    except FileNotFoundError:
        return []
    out: list[tuple[str, dict[str, Any] | None]] = []
    for name in names:
        run = name[: -len(".json")]
        if not is_run_id(run):
            continue
        try:
            obj = orjson.loads((d / name).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            obj = None
        out.append((run, obj if isinstance(obj, dict) else None))
    return out


__all__ = [
    "ServeInfo",
    "find_server",
    "info_path",
    "new_token",
    "queue_drop",
    "queue_items",
    "queue_put",
    "read_info",
    "read_token",
    "remove_info",
    "serve_dir",
    "token_path",
    "write_info",
]
