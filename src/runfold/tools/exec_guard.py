"""The guard that outlives a killed runfold process just long enough to end what `exec` started.

A command runs in a process group of its own, which the run loop kills when the call ends or is
cancelled; but a process killed outright (SIGKILL, a crash) cannot. One small guard process per
runfold process is told each live group over a pipe; when the pipe closes — the runfold process
is gone, however it died — the guard kills every group still live, then exits.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO

GUARD_SCRIPT = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    try:
        pgid = int(line[1:])
    except ValueError:
        continue
    if line[0] == "+":
        groups.add(pgid)
    else:
        groups.discard(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""
"""The guard: reads `+PGID` / `-PGID` lines; at end of input kills every group still listed."""


class _Guard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipe: IO[str] | None = None
        self._failed = False

    def _open(self) -> IO[str] | None:
        if self._pipe is None and not self._failed:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", GUARD_SCRIPT],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # no terminal signal reaches it; it ends with its input
                    text=True,
                )
            except OSError:
                self._failed = True  # no guard: the groups are still killed when a call ends
                return None
            self._pipe = proc.stdin
        return self._pipe

    def _send(self, line: str) -> None:
        with self._lock:
            pipe = self._open()
            if pipe is None:
                return
            try:
                pipe.write(line)
                pipe.flush()
            except (OSError, ValueError):
                self._failed = True
                self._pipe = None

    def preexec(self) -> Callable[[], None] | None:
        with self._lock:
            pipe = self._open()
            if pipe is None:
                return None
            fd = pipe.fileno()

        def register() -> None:  # in the child, after setsid, before exec: no window is left
            with contextlib.suppress(OSError):
                os.write(fd, f"+{os.getpid()}\n".encode())

        return register

    def release(self, pgid: int) -> None:
        if self._pipe is not None:
            self._send(f"-{pgid}\n")


_GUARD = _Guard()


def guard_preexec() -> Callable[[], None] | None:
    """A `preexec_fn` for a command started in a session of its own: the child tells the guard
    its group itself, before it execs, so a kill of this process at any moment after the fork
    still ends the group (the child holds the guard's pipe open until it execs). None when no
    guard could be started (or on Windows)."""
    if sys.platform == "win32":
        return None
    return _GUARD.preexec()


def release_group(pgid: int) -> None:
    """The group `pgid` (registered by `guard_preexec`) was killed and reaped by this process:
    the guard forgets it."""
    with contextlib.suppress(Exception):
        _GUARD.release(pgid)
