"""Group commit across the runs of one event loop: one write and one fsync serve every line
staged before it, whichever run staged it (DESIGN.md §3 "Group commit").

A run that needs its lines durable (before a model call, before a writing tool acts, at its
freeze) awaits `commit()`; the flush is deferred to the end of the loop's current pass, so every
run that became ready in that pass stages its lines first and they all share one fsync.
It works on any `store.view.LedgerWriter`, so another backend fits behind it.
"""

from __future__ import annotations

import asyncio

from runfold.store.view import LedgerWriter


class GroupCommit:
    """Durability for one run on `ledger`: `flush()` now (synchronous), or `await commit()`:
    durable once the loop's current pass has staged what it will (shared with other runs).

    Counters `batches` (flushes that wrote lines) and `lines` (lines they wrote) count this
    object's own flushes."""

    def __init__(self, ledger: LedgerWriter) -> None:
        self.ledger = ledger
        self._waiters: list[asyncio.Future[None]] = []
        self._scheduled = False
        self.batches = 0
        self.lines = 0

    def flush(self) -> int:
        """Make every staged line durable now; returns how many lines were written. Raises what
        the writer's `flush` raises (`E_STORAGE_FATAL`)."""
        n = self.ledger.flush()
        if n:
            self.batches += 1
            self.lines += n
        return n

    async def commit(self) -> None:
        """Return once every line staged before the call is durable. The flush runs at the end
        of the event loop's current pass, so the lines other runs stage in that pass share its
        fsync. Raises what the writer's `flush` raises; a caller cancelled while waiting leaves
        the flush to happen anyway (its lines stay staged and go out with the batch)."""
        if not self.ledger.staged:
            return  # another run's flush already made them durable
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush_waiters)
        await waiter

    def _flush_waiters(self) -> None:
        self._scheduled = False
        waiters, self._waiters = self._waiters, []
        try:
            self.flush()
        except BaseException as exc:
            for w in waiters:
                if not w.done():
                    w.set_exception(exc)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            return
        for w in waiters:
            if not w.done():
                w.set_result(None)


__all__ = ["GroupCommit", "LedgerWriter"]
