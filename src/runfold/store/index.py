"""The workspace index's lifecycle: open, check against the ledger, extend, rebuild, flush, close.

The index file (`runfold.store.index_file`, packed rows in `runfold.store.index_blocks`) is a
disposable cache; `Index` is the one object `Ledger` holds for it. It takes the index lock,
checks the file's last row against the ledger bytes, fills the file from the writer's verifying
scan or a reader's catch-up scan, rebuilds it when a read finds it stale, and answers the reads
`Ledger` verifies (DESIGN.md §3, "Index").
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from runfold.core.canonical import Envelope, chain_hash
from runfold.core.chain import LineChecker
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.records import Record
from runfold.store.index_file import FLUSH_ROWS, INDEX_FILE, SCAN_FLUSH_ROWS, Entry, LedgerIndex, Rows
from runfold.store.layout import Layout
from runfold.store.verify import Progress, ScanResult, SegmentList, scan

__all__ = ["Index"]


class Index:
    """The index of one opened `Ledger` (writer or reader), from open to close.

    `open_writer` / `open_reader` verify the ledger with one scan (feeding the index the lines it
    lacks) and return that scan's result; `rebuild` starts the file over from a full scan;
    `entry`, `run_entries`, `runs`, `flush_due`, `prepare_batch` and `add_rows` read and extend it; `close` flushes (a sound writer) or drops unflushed rows, and releases the index lock.
    Not thread-safe: one thread at a time (the writer's, or its sync helper while the writer
    waits for it).
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._file: LedgerIndex | None = None
        self._lock_fd: int | None = None

    # ---- opening ---------------------------------------------------------------------

    def open_writer(
        self,
        segments: SegmentList,
        progress: Progress | None,
        remember: frozenset[int] = frozenset(),
        garbage_tail: bool = False,
    ) -> ScanResult:
        """Hold the index lock for the writer's life, open (or make) the file and verify the
        whole ledger with one scan that also gives the file every line it lacks (an index
        ahead of or disagreeing with the ledger is rebuilt). The file is flushed before
        returning. `remember` and `garbage_tail` are passed to `scan`. Raises
        `E_STORAGE_FATAL` when the index cannot be opened, `LineRefused` for damage in the ledger."""
        try:
            self._lock_fd = self._lock(block=True)
            idx = self._file = self._open_file()
        except (OSError, sqlite3.Error) as exc:
            raise RunfoldError(
                ErrorCode.STORAGE_FATAL,
                f"open the index for writing ({exc})",
                str(self.layout.index_dir),
                "remove that directory or what blocks it (the index is disposable: runfold rebuilds "
                "it from the ledger), then run the command again",
            ) from exc
        if not self._matches_ledger(idx):
            idx.reset()
        idx.flush_rows = SCAN_FLUSH_ROWS
        res = scan(
            segments,
            LineChecker(),
            sink=_sink(idx),
            sink_from=idx.next_seq,
            progress=progress,
            remember=remember,
            garbage_tail=garbage_tail,
        )
        if idx.next_seq != res.next_seq:  # the index ran ahead of the ledger: rebuild it
            idx.reset()
            res = scan(
                segments,
                LineChecker(),
                sink=_sink(idx),
                progress=progress,
                remember=remember,
                garbage_tail=garbage_tail,
            )
        idx.flush()
        idx.flush_rows = FLUSH_ROWS
        return res

    def open_reader(self, segments: SegmentList, progress: Progress | None) -> ScanResult:
        """Take no lock to read: open the file when it matches the ledger and verify only the
        lines after its last row (catching the index up, persisted when no writer holds the
        index lock), else rebuild it from a full scan. Returns the scan's result (its
        `next_seq`/`head` are the whole ledger's). Raises `LineRefused` for damage."""
        path = self.layout.index_dir / INDEX_FILE
        idx: LedgerIndex | None = None
        if path.exists():
            try:
                idx = LedgerIndex(path)
            except (sqlite3.DatabaseError, OSError):
                idx = None
            if idx is not None and (idx.next_seq == 0 or not self._matches_ledger(idx)):
                idx.close()
                idx = None
        pos = idx.last_position() if idx is not None else None
        start = None if pos is None else next((i for i, (s, _) in enumerate(segments) if s == pos[0]), None)
        if idx is None or pos is None or start is None:
            if idx is not None:  # pragma: no cover - validated above
                idx.close()
            return self._rebuild_for_reader(segments, progress)
        idx.autoflush = False
        self._file = idx
        _seg, off, length = pos
        n = idx.next_seq
        res = scan(
            segments,
            LineChecker(n, idx.head),
            start_segment=start,
            start_offset=off + length + 1,
            line_no=n + 1,
            sink=_sink(idx),
            sink_from=n,
            progress=progress,
        )
        if res.lines:
            self._reader_flush(idx)
        return res

    def rebuild(self, segments: SegmentList, *, writer: bool) -> ScanResult:
        """Start the index over from a full scan of `segments` (after a read found it stale);
        returns the scan's result for the caller to compare with its view. A writer keeps the
        lock it holds (a file SQLite finds malformed is replaced); a reader rebuilds as on open."""
        idx = self.file()
        if not writer:
            idx.discard_and_close()  # a reader writes the index only holding its lock
            self._file = None
            return self._rebuild_for_reader(segments, None)
        try:
            idx.reset()
        except sqlite3.DatabaseError:  # a malformed file: start a new one
            idx.discard_and_close()
            idx = self._file = self._open_file(reset=True)
        idx.flush_rows = SCAN_FLUSH_ROWS
        res = scan(segments, LineChecker(), sink=_sink(idx))
        idx.flush()
        idx.flush_rows = FLUSH_ROWS
        return res

    # ---- reading and extending -------------------------------------------------------

    def file(self) -> LedgerIndex:
        """The open index file; `E_INVALID_ARGS` once the index (its Ledger) was closed."""
        if self._file is None:
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                "read the ledger",
                str(self.layout.ws),
                "this Ledger was closed; open it again",
            )
        return self._file

    def entry(self, seq: int) -> Entry | None:
        """The row of `seq` (None when the index holds none). Raises `IndexMismatch` or
        `sqlite3.DatabaseError` for a damaged file (answer: `rebuild`)."""
        return self.file().entry(seq)

    def run_entries(self, run: str, since: int = 0, limit: int | None = None) -> list[Entry]:
        """The rows of `run` in seq order from seq `since`, at most `limit`; errors as `entry`."""
        return self.file().run_entries(run, since, limit)

    def runs(self) -> list[str]:
        """Every run id in order of first appearance, without the workspace (nil) run."""
        return self.file().runs()

    def flush_due(self) -> bool:
        """True when the next `prepare_batch` writes the rows held in memory to the file."""
        idx = self.file()
        return idx.autoflush and idx.flush_due()

    def prepare_batch(self, seq: int, seg: int, off: int, records: Sequence[Record]) -> Rows:
        """The rows of a batch being made durable: consecutive `records` from `seq`, laid out
        from `off` of segment `seg`, built without adding them (`add_rows` does, once the batch
        is durable). First writes the rows held in memory when `flush_rows` of them wait: all
        are rows of durable lines, so the file never runs ahead of the ledger. The writer runs
        this on its sync helper during the batch's fdatasync. Raises `sqlite3.Error` when that
        write fails."""
        idx = self.file()
        if self.flush_due():
            idx.flush(full=False)
        return idx.rows_for(seq, seg, off, [(len(r.raw), r.hash, r.env.run) for r in records])

    def add_rows(self, rows: Rows) -> None:
        """Add rows from `rows_for` once their lines are durable (the index never runs ahead
        of the ledger)."""
        self.file().add_rows(rows)

    # ---- closing ---------------------------------------------------------------------

    def close(self, *, keep: bool) -> None:
        """Flush the file's rows (`keep`: a sound writer) or drop the unflushed ones, close it
        and release the index lock. Safe to call twice."""
        idx, self._file = self._file, None
        try:
            if idx is not None:
                if keep:
                    idx.close()
                else:
                    idx.discard_and_close()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    # ---- internals -------------------------------------------------------------------

    def _open_file(self, *, reset: bool = False) -> LedgerIndex:
        """The index file, opened (and emptied when `reset`); a file SQLite finds malformed is
        deleted and made anew (the index is disposable). Call it holding the index lock."""
        self.layout.index_dir.mkdir(parents=True, exist_ok=True)
        path = self.layout.index_dir / INDEX_FILE
        idx: LedgerIndex | None = None
        try:
            idx = LedgerIndex(path)
            if reset:
                idx.reset()
            return idx
        except sqlite3.DatabaseError:
            if idx is not None:
                idx.discard_and_close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            return LedgerIndex(path)

    def _lock(self, block: bool) -> int | None:
        self.layout.index_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.layout.index_dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if block else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _matches_ledger(self, idx: LedgerIndex) -> bool:
        """True when the index's last line is still at its place with its hash (DESIGN: the
        index is checked against the ledger's length/head on open)."""
        pos = idx.last_position()
        if pos is None:
            return True
        seg, off, length = pos
        path = self.layout.segment_path(seg)
        try:
            with open(path, "rb") as f:
                f.seek(off)
                data = f.read(length + 1)
        except OSError:
            return False
        if len(data) == length:  # the last line of the ledger, missing only its newline
            return chain_hash(data) == idx.head
        return len(data) == length + 1 and data[-1:] == b"\n" and chain_hash(data[:-1]) == idx.head

    def _reader_flush(self, idx: LedgerIndex) -> None:
        """Persist catch-up rows when no writer holds the index (best effort; the index is a cache)."""
        fd = self._lock(block=False)
        if fd is None:
            return
        try:
            if idx.flushed_rows_current():
                idx.flush()
        except (sqlite3.Error, OSError):
            pass
        finally:
            os.close(fd)

    def _rebuild_for_reader(self, segments: SegmentList, progress: Progress | None) -> ScanResult:
        """A reader's full scan into a new index: written to the file when the index lock is
        free and the directory writable, else kept in memory for this reader only."""
        fd = self._lock(block=False) if os.access(self.layout.root, os.W_OK) else None
        idx: LedgerIndex
        if fd is not None:
            try:
                idx = self._open_file(reset=True)
            except (sqlite3.Error, OSError):
                os.close(fd)
                fd = None
                idx = LedgerIndex(None)
        else:
            idx = LedgerIndex(None)
        self._file = idx
        try:
            # an index only in memory flushes too: its rows are then read through SQLite
            idx.autoflush = fd is not None or idx.path is None
            idx.flush_rows = SCAN_FLUSH_ROWS
            res = scan(segments, LineChecker(), sink=_sink(idx), progress=progress)
            if idx.autoflush:
                idx.flush()
        finally:
            idx.autoflush = False
            idx.flush_rows = FLUSH_ROWS
            if fd is not None:
                os.close(fd)
        return res


def _sink(idx: LedgerIndex) -> Callable[[int, int, int, str, Envelope], None]:
    add = idx.add

    def sink(seg: int, off: int, length: int, digest: str, env: Envelope) -> None:
        add(env.seq, seg, off, length, digest, env.run)

    return sink
