"""`LedgerView`: what a reader of verified ledger lines needs, whatever keeps them (DESIGN.md §3).

The workspace `Ledger` and the `BareLedger` of a foreign directory or segment file both provide
it, so folds, replay and control read through one shape without knowing which one they hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from runfold.core.records import Draft, Record
from runfold.store.layout import Layout


class LedgerView(Protocol):
    """A read-only view of verified lines, as they were when the view was opened.

    `next_seq` is one past the last line's seq; `head` the last line's chain hash (64 hex).
    `records(since)` streams lines from seq `since`; `run_records(run)` gives one run's lines
    in seq order ([] for an unknown run); `record_at(seq)` one line. Readers raise `LineRefused`
    or `E_LEDGER_CORRUPT` when the ledger changed on disk under them.
    """

    @property
    def next_seq(self) -> int: ...

    @property
    def head(self) -> str: ...

    def segments(self) -> list[Path]:
        """The segment files of the view, in chain order."""
        ...

    def runs(self) -> list[str]:
        """Every run id in order of first appearance, without the workspace (nil) run."""
        ...

    def records(self, since: int = 0) -> Iterator[Record]: ...

    def run_records(self, run: str, limit: int | None = None, since: int = 0) -> list[Record]: ...

    def record_at(self, seq: int) -> Record: ...

    def close(self) -> None: ...


class LedgerWriter(LedgerView, Protocol):
    """A workspace ledger of any store (files, PostgreSQL), opened as a reader or as the one
    writer: the view plus group commit (`stage`, `flush`, `append`, `on_durable`, DESIGN.md §3).

    `ws` is the workspace directory; `layout` its `.runfold/` paths (settings, CAS, control
    files stay there whatever keeps the lines); `writer` whether this is the one writer.
    `append`/`flush` raise `E_STORAGE_FATAL` once the store failed (the writer then refuses
    every later append) and `E_INVALID_ARGS` for a bad draft, as `Ledger.append` says.
    """

    ws: Path
    layout: Layout
    writer: bool
    on_durable: list[Callable[[Sequence[Record]], None]]

    def append(self, drafts: Sequence[Draft]) -> list[Record]: ...

    def stage(self, drafts: Sequence[Draft]) -> list[Record]: ...

    @property
    def staged(self) -> int: ...

    def flush(self) -> int: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
