"""Waiting for a workspace's next lines, for live tails (`runfold log --follow`): a
PostgreSQL-backed workspace is woken by the writer's NOTIFY (`pg_tools.LineWaiter`), a file
ledger by a cheap poll of its segment files' sizes (a reader is opened only once they change).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType
from typing import Protocol

from runfold.store.backend import open_ledger, store_setting
from runfold.store.layout import Layout, list_segments

POLL_S = 0.2
"""How often a file ledger's segment sizes are looked at while waiting."""


class LineWait(Protocol):
    """`wait(next_seq, timeout_s)`: block until the workspace holds a line at `next_seq` or
    later, or `timeout_s` passed; returns the workspace's next seq then. `close()` ends it."""

    def wait(self, next_seq: int, timeout_s: float) -> int: ...

    def close(self) -> None: ...


class PollWaiter:
    """`LineWait` for a file ledger: polls the segments' sizes every `POLL_S` s and opens a
    reader (for its next seq) only when they changed."""

    def __init__(self, ws: Path) -> None:
        self.ws = ws
        self._dir = Layout(ws).ledger_dir
        self._seen: tuple[tuple[int, int], ...] | None = None
        self._next = 0

    def _sizes(self) -> tuple[tuple[int, int], ...]:
        out = []
        for first, path in list_segments(self._dir):
            try:
                out.append((first, os.stat(path).st_size))
            except FileNotFoundError:
                continue
        return tuple(out)

    def _stored_next(self) -> int:
        sizes = self._sizes()
        if sizes != self._seen:
            with open_ledger(self.ws, writer=False) as reader:
                self._next = reader.next_seq
            self._seen = sizes
        return self._next

    def wait(self, next_seq: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        known = self._stored_next()
        while known <= next_seq and time.monotonic() < deadline:
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
            known = self._stored_next()
        return known

    def close(self) -> None:
        pass


class Waiting:
    """A `LineWait` as a context manager (closed at the end of the block)."""

    def __init__(self, waiter: LineWait) -> None:
        self.waiter = waiter

    def __enter__(self) -> LineWait:
        return self.waiter

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.waiter.close()


def line_waiter(ws: Path) -> Waiting:
    """The `LineWait` of the workspace at `ws`: LISTEN/NOTIFY for a PostgreSQL store (raises
    `E_STORAGE_FATAL` when the server cannot be reached, `E_CONFIG_INVALID` for a bad store
    setting), else a poll of the file ledger. Use as `with line_waiter(ws) as w: w.wait(...)`."""
    url = store_setting(ws)
    if url is None:
        return Waiting(PollWaiter(ws))
    from runfold.store.pg_tools import LineWaiter

    return Waiting(LineWaiter(url))


__all__ = ["POLL_S", "LineWait", "PollWaiter", "Waiting", "line_waiter"]
