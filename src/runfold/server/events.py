"""Durable lines out to event streams: every batch the writer makes durable is handed, line by line,
to the subscribers of each line's run (DESIGN.md §3: a line is shown only once it is fsynced).

A stream reads a run's history from the ledger, then its live lines from its subscription; both
run on the event loop's thread, so subscribing before reading the history loses nothing, and a
line seen twice (history and live) is skipped by seq. Order is seq.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from runfold.core.kinds import Kind
from runfold.core.records import Record
from runfold.store.view import LedgerWriter

END = None
"""What a subscription receives when its run will write no more lines (it never started)."""

_FROZEN = Kind.RUN_FROZEN.value
_STARTED = Kind.RUN_STARTED.value


class EventFanout:
    """The writer's `on_durable` callback (`publish`) and the subscriptions of event streams.

    `on_started(run, seq)` is called for each durable `run_started`. `batches` counts durable
    batches, `lines` their lines: lines per batch is the group-commit ratio."""

    def __init__(self, on_started: Callable[[str, int], None] | None = None) -> None:
        self._subs: dict[str, set[asyncio.Queue[Record | None]]] = {}
        self.on_started = on_started
        self.batches = 0
        self.lines = 0

    def publish(self, batch: Sequence[Record]) -> None:
        """Hand each line of a durable batch to the subscribers of its run."""
        self.batches += 1
        self.lines += len(batch)
        subs = self._subs
        started = self.on_started
        for rec in batch:
            env = rec.env
            queues = subs.get(env.run)
            if queues:
                for q in queues:
                    q.put_nowait(rec)
            if started is not None and env.kind == _STARTED:
                started(env.run, rec.seq)

    def end(self, run: str) -> None:
        """Tell the subscribers of `run` that it will write no line (it never started)."""
        for q in self._subs.get(run, ()):
            q.put_nowait(END)

    def end_all(self) -> None:
        """Tell every subscriber that its run will write no more lines here (the server stops)."""
        for queues in self._subs.values():
            for q in queues:
                q.put_nowait(END)

    def subscribe(self, run: str) -> asyncio.Queue[Record | None]:
        q: asyncio.Queue[Record | None] = asyncio.Queue()
        self._subs.setdefault(run, set()).add(q)
        return q

    def unsubscribe(self, run: str, q: asyncio.Queue[Record | None]) -> None:
        subs = self._subs.get(run)
        if subs is not None:
            subs.discard(q)
            if not subs:
                del self._subs[run]

    async def stream(
        self,
        ledger: LedgerWriter,
        run: str,
        since: int,
        *,
        live: Callable[[], bool],
        idle_s: float = 15.0,
    ) -> AsyncIterator[Record | None]:
        """The durable lines of `run` with seq ≥ `since`, in seq order: its history, then each
        line as it becomes durable, ending after its `run_frozen` (or at once when `live()` says
        the run will write no more). Yields None after `idle_s` s without a line (a keep-alive)."""
        q = self.subscribe(run)
        try:
            last = since - 1
            for rec in ledger.run_records(run):
                if rec.seq >= since:
                    yield rec
                    last = rec.seq
                if rec.env.kind == _FROZEN:
                    return
            if not live():
                return
            while True:
                try:
                    item = await asyncio.wait_for(q.get(), idle_s)
                except TimeoutError:
                    yield None
                    continue
                if item is END:
                    return
                if item.seq <= last:
                    continue
                last = item.seq
                if item.seq >= since:
                    yield item
                if item.env.kind == _FROZEN:
                    return
        finally:
            self.unsubscribe(run, q)


__all__ = ["END", "EventFanout"]
