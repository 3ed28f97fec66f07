"""The control inbox on disk: steer and cancel requests between processes (DESIGN.md §5–§6).

A sender writes one request file per signal under `.runfold/control/inbox/`; the process that
owns the workspace (it holds `owner.lock`) answers in `acks/` and deletes the request once the run
recorded it in the ledger. Every file is written atomically (temporary file, fsync, rename, fsync
of the directory), so a crash of either side leaves either the old file or the new one, whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from runfold.core.errors import ErrorCode, Retry, RunfoldError, invalid_args
from runfold.core.ids import is_run_id
from runfold.store.durable import fsync_dir, replace_durably
from runfold.store.layout import Layout
from runfold.store.locks import LockHeld, lock_held, take_pid_lock

SIGNAL_TYPES: Final = ("steer", "cancel", "approve", "deny")
"""`type` of a request: words for the run (`steer_received`), a cancel (`cancel_received`), or
a decision on a call waiting for approval (`approval_resolved`; `call` names it, `text` is the
reason of a denial)."""
ACK_STATES: Final = ("accepted", "refused", "recorded")
"""`state` of an ack: handed to the live run (lands at its next safe point), refused (with
`reason`), or recorded in the ledger (with `seq`)."""

MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
"""Largest request file read, in bytes: a larger one is refused as unreadable (and removed), so
a stray huge file cannot exhaust the owner's memory. Senders refuse a steer that would exceed it."""

STALE_S: Final = 3600.0
"""Age in seconds after which `ControlDir.prune` deletes an ack nobody read (its request is
gone) and a temporary file a killed writer left."""

SignalType = Literal["steer", "cancel", "approve", "deny"]
AckState = Literal["accepted", "refused", "recorded"]


def new_signal_id() -> str:
    """A fresh signal id: `sig-` + 32 lowercase hex (uuid4)."""
    return "sig-" + uuid.uuid4().hex


def is_signal_id(value: str) -> bool:
    """True for `sig-` followed by 32 lowercase hex digits (what `new_signal_id` makes)."""
    body = value[4:]
    return value.startswith("sig-") and len(body) == 32 and all(c in "0123456789abcdef" for c in body)


@dataclass(frozen=True)
class ControlRequest:
    """One request in the inbox: `signal` (its id, also the file name), `run` (the target's full
    id), `type` (`steer`|`cancel`|`approve`|`deny`), `source` (the `steer_received.source` wire
    form: `user`, or a letter's `@<addr> run=<id> kind=steer sender=<state>`), `text` (the words;
    empty for a cancel; a denial's reason), `sent_at_ms` (UTC ms, the sender's clock) and `call`
    (the `tool_use_id` an approve or deny decides)."""

    signal: str
    run: str
    type: SignalType
    source: str = "user"
    text: str = ""
    sent_at_ms: int = 0
    call: str = ""

    def to_json(self) -> bytes:
        obj: dict[str, Any] = {
            "signal": self.signal,
            "run": self.run,
            "type": self.type,
            "source": self.source,
            "text": self.text,
            "sent_at_ms": self.sent_at_ms,
        }
        if self.call:
            obj["call"] = self.call
        return orjson.dumps(obj)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> ControlRequest:
        """Parse a request file's bytes. Raises `E_INVALID_ARGS` naming `where` and the field."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise invalid_args("read control request", where, "the file is not JSON; delete it") from None
        if not isinstance(obj, dict):
            raise invalid_args("read control request", where, "the file is not a JSON object; delete it")
        signal, run, kind = obj.get("signal"), obj.get("run"), obj.get("type")
        source, text, sent = obj.get("source", "user"), obj.get("text", ""), obj.get("sent_at_ms", 0)
        call = obj.get("call", "")
        problem = None
        if not isinstance(signal, str) or not is_signal_id(signal):
            problem = "`signal` is not a signal id"
        elif not isinstance(run, str) or not is_run_id(run):
            problem = "`run` is not a run id"
        elif kind not in SIGNAL_TYPES:
            problem = "`type` is not steer, cancel, approve or deny"
        elif not isinstance(source, str) or not isinstance(text, str):
            problem = "`source` or `text` is not a string"
        elif not isinstance(sent, int) or isinstance(sent, bool):
            problem = "`sent_at_ms` is not an integer"
        elif not isinstance(call, str) or (kind in ("approve", "deny")) != bool(call):
            problem = "`call` must name the call of an approve or deny, and only then"
        if problem is not None:
            raise invalid_args(f"read control request ({problem})", where, "delete the file and send again")
        return cls(signal, run, kind, source, text, sent, call)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ControlAck:
    """The owner's answer to one request: `state` (`accepted`|`refused`|`recorded`), `pid` of the
    owner, `reason` (why it was refused), `seq` (the ledger line that recorded it)."""

    state: AckState
    pid: int
    reason: str | None = None
    seq: int | None = None

    def to_json(self) -> bytes:
        obj: dict[str, Any] = {"state": self.state, "pid": self.pid}
        if self.reason is not None:
            obj["reason"] = self.reason
        if self.seq is not None:
            obj["seq"] = self.seq
        return orjson.dumps(obj)

    @classmethod
    def from_json(cls, raw: bytes) -> ControlAck | None:
        """Parse an ack's bytes; None when they are not an ack (a foreign or damaged file)."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if (
            not isinstance(obj, dict)
            or obj.get("state") not in ACK_STATES
            or not isinstance(obj.get("pid"), int)
        ):
            return None
        reason, seq = obj.get("reason"), obj.get("seq")
        return cls(
            obj["state"],
            obj["pid"],
            reason if isinstance(reason, str) else None,
            seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
        )


def _storage(action: str, path: Path, exc: OSError) -> RunfoldError:
    return RunfoldError(
        ErrorCode.STORAGE_FATAL,
        f"{action} ({exc.strerror or exc})",
        str(path),
        "check that the workspace's .runfold/control directory is writable and the disk has room",
    )


def _write_atomically(directory: Path, name: str, data: bytes) -> Path:
    """Write `directory/name` through a temporary file, fsync, rename, fsync of the directory."""
    final = directory / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
        replace_durably(final, data)
    except OSError as exc:
        raise _storage("write a control file", final, exc) from None
    return final


class _NotARequest(Exception):
    """The inbox entry is not a regular file (it is skipped, never read or deleted)."""


def _read_request_file(path: Path) -> bytes:
    """Up to `MAX_REQUEST_BYTES + 1` bytes of the regular file `path`, opened without following a
    symlink and without blocking on a FIFO. Raises `_NotARequest` for anything but a regular
    file, `OSError` when it cannot be read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path) or path.is_dir():
            raise _NotARequest from None
        raise exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotARequest
        chunks: list[bytes] = []
        left = MAX_REQUEST_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class ControlDir:
    """The control directory of the workspace at `ws`: `inbox/<signal>.json` (requests),
    `acks/<signal>.json` (answers), `owner.lock` (held by the process running the runs)."""

    def __init__(self, ws: Path) -> None:
        self.root = Layout(ws).control_dir
        self.inbox = self.root / "inbox"
        self.acks = self.root / "acks"
        self.owner_lock = self.root / "owner.lock"

    # ---- requests ---------------------------------------------------------------------------

    def request_path(self, signal: str) -> Path:
        return self.inbox / f"{signal}.json"

    def write_request(self, request: ControlRequest) -> Path:
        """Put `request` in the inbox atomically; returns its path. `E_STORAGE_FATAL` on an OS error."""
        return _write_atomically(self.inbox, f"{request.signal}.json", request.to_json())

    def requests(self) -> list[tuple[str, ControlRequest | RunfoldError]]:
        """Every request in the inbox as (signal id from the file name, request or the error that
        makes it unreadable), oldest first (by `sent_at_ms`, then name). Temporary files and entries
        that are not regular files (directories, FIFOs, devices, symlinks) are skipped: they are
        never read (a FIFO would block, a symlink to a device would never end) nor deleted. A file
        over `MAX_REQUEST_BYTES` is an unreadable request (refused and removed by the owner)."""
        try:
            names = sorted(n for n in os.listdir(self.inbox) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return []
        out: list[tuple[int, str, ControlRequest | RunfoldError]] = []
        for name in names:
            path = self.inbox / name
            try:
                raw = _read_request_file(path)
            except FileNotFoundError:
                continue  # removed meanwhile
            except _NotARequest:
                continue  # a directory, FIFO, device or symlink: not ours to read or delete
            except OSError as exc:
                out.append((0, name[:-5], _storage("read a control request", path, exc)))
                continue
            if len(raw) > MAX_REQUEST_BYTES:
                too_big = invalid_args(
                    f"read control request (larger than {MAX_REQUEST_BYTES} bytes)",
                    str(path),
                    "send shorter words (put long text in a file and name the file)",
                )
                out.append((0, name[:-5], too_big))
                continue
            try:
                req = ControlRequest.from_json(raw, str(path))
            except RunfoldError as err:
                out.append((0, name[:-5], err))
                continue
            if req.signal != name[:-5]:
                mismatch = invalid_args(
                    "read control request (its `signal` differs from its file name)",
                    str(path),
                    "delete the file and send again",
                )
                out.append((0, name[:-5], mismatch))
                continue
            out.append((req.sent_at_ms, name[:-5], req))
        out.sort(key=lambda item: (item[0], item[1]))
        return [(name, item) for _, name, item in out]

    def remove_request(self, signal: str) -> None:
        """Delete the request file (missing is fine), then fsync the inbox directory."""
        try:
            self.request_path(signal).unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _storage("delete a control request", self.request_path(signal), exc) from None
        with contextlib.suppress(OSError):
            fsync_dir(self.inbox)

    # ---- acks -------------------------------------------------------------------------------

    def ack_path(self, signal: str) -> Path:
        return self.acks / f"{signal}.json"

    def write_ack(self, signal: str, ack: ControlAck) -> None:
        """Write (or replace) the answer to `signal` atomically."""
        _write_atomically(self.acks, f"{signal}.json", ack.to_json())

    def read_ack(self, signal: str) -> ControlAck | None:
        """The answer to `signal`, or None when there is none yet."""
        try:
            return ControlAck.from_json(self.ack_path(signal).read_bytes())
        except OSError:
            return None

    def remove_ack(self, signal: str) -> None:
        with contextlib.suppress(OSError):
            self.ack_path(signal).unlink()

    def prune(self, older_than_s: float = STALE_S, now_s: float | None = None) -> int:
        """Delete what nobody will read again (call it as the owner): acks whose request is no
        longer in the inbox and whose file is older than `older_than_s` s (a sender reads its
        ack within a poll, 50 ms; one that did not wait never reads it), and temporary files a
        killed writer left in `inbox/` or `acks/` that long ago. Entries that are not regular
        files are left alone. Returns how many files were deleted; OS errors are ignored (the
        files stay for the next owner)."""
        cutoff = (time.time() if now_s is None else now_s) - older_than_s
        removed = 0
        for directory in (self.inbox, self.acks):
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                name = entry.name
                temporary = name.startswith(".") and ".tmp" in name
                stale_ack = (
                    directory == self.acks
                    and name.endswith(".json")
                    and not self.request_path(name[:-5]).exists()
                )
                if not (temporary or stale_ack):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                    if not stat.S_ISREG(info.st_mode) or info.st_mtime >= cutoff:
                        continue
                    os.unlink(entry.path)
                    removed += 1
                except OSError:
                    continue
        return removed

    # ---- the owner --------------------------------------------------------------------------

    def owner_present(self) -> bool:
        """True when a process holds `owner.lock` (`locks.lock_held`; a missing file means no owner)."""
        return lock_held(self.owner_lock)

    def owner_pid(self) -> str:
        """The pid the owner wrote in `owner.lock` ("unknown" when unreadable)."""
        try:
            return self.owner_lock.read_text(encoding="utf-8").strip() or "unknown"
        except OSError:
            return "unknown"

    def take_owner_lock(self, timeout_s: float = 5.0) -> int:
        """Take `owner.lock` exclusively (call it while holding the writer lock) and write our pid;
        returns the fd to pass to `release_owner_lock`. A sender's probe holds a shared lock for a
        moment, so this retries for up to `timeout_s` s. Raises `E_LEDGER_HELD` when it stays taken."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            return take_pid_lock(self.owner_lock, wait_s=timeout_s, poll_s=0.01, wait_for_live_holder=True)
        except LockHeld:
            raise RunfoldError(
                ErrorCode.LEDGER_HELD,
                "take the control owner lock",
                str(self.owner_lock),
                "another process holds it; stop the other runfold process, then retry",
                retry=Retry.YES,
            ) from None

    @staticmethod
    def release_owner_lock(fd: int) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(fd)


__all__ = [
    "ACK_STATES",
    "MAX_REQUEST_BYTES",
    "SIGNAL_TYPES",
    "STALE_S",
    "AckState",
    "ControlAck",
    "ControlDir",
    "ControlRequest",
    "SignalType",
    "is_signal_id",
    "new_signal_id",
]
