"""The run's safe points (DESIGN.md §5): where the person's steers become `steer_received`
lines and a cancel becomes `cancel_received` and the run's stop.

Kept apart from the turn loop: this is the run's inbound side — the cancel event, the steer
queue and the control hub's signal ids (each recorded exactly once, acked once durable).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable
from typing import TypeVar

from runfold.core.payloads import CancelReceived, Payload, SteerReceived
from runfold.core.records import Record
from runfold.runtime.control import Steer, steer_author
from runfold.runtime.loop_io import RunChannels, Stop
from runfold.store.group_commit import GroupCommit
from runfold.store.view import LedgerWriter

T = TypeVar("T")

Write = Callable[[Payload, str], Record]
"""`write(payload, who) -> record`: stage one line of the run (folded and reported)."""


class Interrupted(enum.Enum):
    """`SafePoints.race`'s answer when the cancel event fired while something was in flight."""

    CANCELLED = "cancelled"


class SafePoints:
    """One run's safe points. `channels`: its cancel event, steer queue and control link;
    `person`: the author of the person's lines; `write` stages a line of the run on `ledger`,
    made durable now (`SafePoints.flush`) or with the loop's next group commit
    (`SafePoints.commit`, `durability`), after which the signals recorded are acked; `settle` is called
    just before a `cancel_received` is written (the run loop completes an open wave there)."""

    def __init__(
        self,
        channels: RunChannels,
        person: str,
        write: Write,
        ledger: LedgerWriter,
        settle: Callable[[], object] | None = None,
    ) -> None:
        self.cancel = channels.cancel
        self._settle = settle
        self.steers = channels.steers
        self.control = channels.control
        self._person = person
        self._write = write
        self.durability = GroupCommit(ledger)
        self._signals: set[str] = set()  # control signal ids this run recorded
        self._unacked: list[tuple[str, int]] = []  # (signal, seq) staged, not yet acked

    def flush(self) -> None:
        """Make the ledger durable now, then ack every control signal recorded since (its inbox
        file may go)."""
        self.durability.flush()
        self._ack()

    async def commit(self) -> None:
        """`flush` through the group commit: durable together with the lines other runs of the
        loop stage in this pass (one fsync for all), then the signals are acked."""
        await self.durability.commit()
        self._ack()

    def _ack(self) -> None:
        if self._unacked:
            done, self._unacked = self._unacked, []
            if self.control is not None:
                for signal, seq in done:
                    self.control.recorded(signal, seq)

    def cancel_set(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def at(self, where: str) -> Stop | None:
        """The safe point `where`: steers waiting in the queue are written (`steer_received`),
        then a cancel is consumed here: the stop of the run, else None."""
        self.take_steers()
        if self.cancel_set():
            return self.cancelled(f"at the safe point {where}")
        return None

    def cancelled(self, when: str) -> Stop:
        """Write the run's `cancel_received` and give the stop of a run the person (or, for a
        delegated run, its parent) cancelled."""
        by = self.cancel_line()
        return Stop("cancelled", f"cancelled by {'the person' if by == 'user' else by} {when}")

    def take_steers(self) -> int:
        """Write every steer waiting in the queue as `steer_received` (a plain string is the
        person's words; a `Steer` carries its source and control signal id). A signal already
        recorded is skipped (exactly-once); when a signal was written the ledger is flushed so
        its inbox file can go. Returns how many lines were written."""
        taken = 0
        while self.steers is not None:
            try:
                item = self.steers.get_nowait()
            except asyncio.QueueEmpty:
                break
            steer = item if isinstance(item, Steer) else Steer(item)
            if not steer.text.strip() or not self._new_signal(steer.signal):
                continue
            rec = self._write(
                SteerReceived(source=steer.source, text=steer.text, signal=steer.signal),
                steer_author(steer.source, self._person),
            )
            self._note_signal(steer.signal, rec)
            taken += 1
        if self._unacked:
            self.flush()
        return taken

    def _new_signal(self, signal: str | None) -> bool:
        if signal is None:
            return True
        return signal not in self._signals and not (
            self.control is not None and self.control.is_recorded(signal)
        )

    def _note_signal(self, signal: str | None, rec: Record) -> None:
        if signal is not None:
            self._signals.add(signal)
            self._unacked.append((signal, rec.seq))

    def cancel_line(self) -> str:
        """The one writer of this run's `cancel_received` (source `user`, or the parent's letter
        source for a cancel a delegating run sent): steers still waiting are written first (never
        lost), then what `settle` writes, then the line carries the control signal id of the
        cancel when it came through the inbox (acked once the freeze is flushed). Returns the
        source written."""
        self.take_steers()
        if self._settle is not None:
            self._settle()
        signal = self.control.cancel_signal if self.control is not None else None
        source = self.control.cancel_source if self.control is not None and signal is not None else "user"
        if signal is not None and not self._new_signal(signal):
            signal = None
        who = "person" if source == "user" else steer_author(source, "person")
        rec = self._write(CancelReceived(source=source, signal=signal), who)
        self._note_signal(signal, rec)
        return source

    async def race(self, coro: Awaitable[T]) -> T | Interrupted:
        """Await `coro`, aborting it when the cancel event fires (then `Interrupted.CANCELLED`).
        An outer cancellation cancels `coro` and propagates."""
        task = asyncio.ensure_future(coro)
        if self.cancel is None:
            return await task
        waiter = asyncio.ensure_future(self.cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            waiter.cancel()
            raise
        if task.done():
            waiter.cancel()
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        return Interrupted.CANCELLED
