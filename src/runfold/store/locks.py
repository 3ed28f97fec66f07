"""Cross-process locks the store takes on small files: an exclusive `flock`, tried without
blocking until a deadline, with the holder's pid written in the file (DESIGN.md §3 "Storage": one
writer per ledger; §5–§6: one owner of the control inbox).

Written once so that the writer lock (`ledger.lock`) and the control owner lock (`owner.lock`)
share one retry loop and one pid stamp; each caller turns `LockHeld` into its own RunfoldError
(`take_writer_lock` does it for the ledger's writer).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from runfold.core.errors import ErrorCode, Retry, RunfoldError

_PID_BYTES = 64
"""Bytes of a lock file read for the holder's pid (a pid and a newline need far fewer)."""


class LockHeld(Exception):
    """`take_pid_lock` gave up: another process still holds the lock on `path`.

    `holder` is the pid text written in the file ("unknown" when it is empty), `holder_alive`
    whether that pid named a live process when the wait ended (unknown: True)."""

    def __init__(self, path: Path, holder: str, holder_alive: bool) -> None:
        super().__init__(f"{path}: held by pid {holder}")
        self.path = path
        self.holder = holder
        self.holder_alive = holder_alive


def pid_alive(text: str) -> bool:
    """Whether `text` (a pid as written in a lock file) names a live process. Text that is not a
    number, or a pid we may not signal, counts as alive (unknown: assume alive)."""
    try:
        pid = int(text)
    except ValueError:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def lock_held(path: Path) -> bool:
    """Whether a live process holds the `flock` on `path` (tried with a shared non-blocking lock,
    released at once; a missing file means no holder). The kernel releases a dead process's
    lock, so a reader tells a live writer from a dead one without writing anything. A lock this
    process holds through another open file counts as held."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    return os.pread(fd, _PID_BYTES, 0).decode("utf-8", "replace").strip() or "unknown"


def take_pid_lock(path: Path, *, wait_s: float, poll_s: float, wait_for_live_holder: bool) -> int:
    """Take an exclusive `flock` on `path` (created with mode 0644 when missing), replace its
    contents with our pid and a newline, and return the open fd (the caller closes it, which
    releases the lock).

    While the lock is taken, retry every `poll_s` s until `wait_s` s have passed: always when
    `wait_for_live_holder`, otherwise only while the pid written in the file is gone (a process
    the dead holder had just started may keep the lock for a moment); a live holder is then
    refused at once. Raises `LockHeld` (the fd closed) when it gives up, OSError when the file
    cannot be opened or written."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline and (wait_for_live_holder or not pid_alive(_holder(fd))):
                time.sleep(poll_s)
                continue
            holder = _holder(fd)
            os.close(fd)
            raise LockHeld(path, holder, pid_alive(holder)) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        os.close(fd)
        raise
    return fd


__all__ = ["DEAD_HOLDER_WAIT_S", "LockHeld", "lock_held", "pid_alive", "take_pid_lock", "take_writer_lock"]


DEAD_HOLDER_WAIT_S = 5.0
"""How long a writer waits for the lock when the process that took it is gone: a process the
dead writer had just started (a tool's shell between fork and exec) may hold the lock for a
moment after a SIGKILL."""


def take_writer_lock(path: Path, recovery: Callable[[str], str] | None = None) -> int:
    """Take the exclusive lock on `ledger.lock` and write our pid into it; returns the fd.

    When the pid written in the file is gone (its process died) but the lock is still taken, a
    child it had just started still holds it: wait up to `DEAD_HOLDER_WAIT_S` for it to go.
    Raises `E_LEDGER_HELD` naming the holder's pid (as written in the file) when it is taken,
    with `recovery(holder)` as its recovery sentence when given (e.g. naming `runfold serve`).
    """
    try:
        return take_pid_lock(path, wait_s=DEAD_HOLDER_WAIT_S, poll_s=0.05, wait_for_live_holder=False)
    except LockHeld as held:
        holder = held.holder
        gone = (
            "" if held.holder_alive else " (that process is gone; a process it started still holds the lock)"
        )
        raise RunfoldError(
            ErrorCode.LEDGER_HELD,
            f"open the ledger for writing (pid {holder} holds the writer lock{gone})",
            str(path),
            recovery(holder)
            if recovery is not None
            else f"another runfold process (pid {holder}) is writing this workspace; wait for it to "
            "finish or stop it, then retry (readers such as verify and log need no lock)",
            retry=Retry.YES,
        ) from None
