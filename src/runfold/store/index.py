"""The disposable ledger index: seq → (segment, offset, length, hash), run → its seqs (DESIGN.md §3).

It lets "the line at seq S" and "the lines of run R" cost the size of the answer instead of a
scan. It is a SQLite file under `.runfold/index/` that can be deleted at any time; `Ledger` checks
it against the ledger on open and rebuilds or extends it from verified lines only.

How reads stay verified without a scan: a row is only ever written for a line that passed the
chain check (a full or catch-up scan, or the writer's own fsynced append), and it stores that
line's BLAKE3. A read through the index re-checks the line with `LineChecker` started at the
stored hash of the line before it (so `prev`, `seq`, canonical bytes and kind are checked) and
compares the line's own BLAKE3 with its stored hash. A line changed on disk after indexing
therefore fails the read; only a ledger and index rewritten together escape it, which a full
`verify` (or a writer's open) still catches.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runfold.core.ids import WORKSPACE_RUN, ZERO_HASH

INDEX_FORMAT = 1
"""Bumped when the schema changes; an index of another format is rebuilt."""
INDEX_FILE = "index.sqlite"
FLUSH_ROWS = 4096
"""Pending rows are written to SQLite once this many accumulate (and on close)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v);
CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS lines (
  seq INTEGER PRIMARY KEY, seg INTEGER NOT NULL, off INTEGER NOT NULL, len INTEGER NOT NULL,
  hash BLOB NOT NULL, run INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS lines_by_run ON lines (run, seq);
"""


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a line is: its segment (by first seq), byte offset and length (no newline), its
    BLAKE3 (hex) and the BLAKE3 of the line before it (64 zeros for seq 0)."""

    seq: int
    seg: int
    off: int
    len: int
    hash: str
    prev: str


class LedgerIndex:
    """Index rows in SQLite plus rows not yet flushed (pending, in memory).

    `path` None keeps everything in memory (a reader that may not write the index). Rows must be
    added in seq order starting at `next_seq`.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.autoflush = path is not None
        """Flush every FLUSH_ROWS rows; a reader turns it off unless it holds the index lock."""
        self._db = sqlite3.connect(":memory:" if path is None else str(path), isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL" if path is not None else "PRAGMA journal_mode=MEMORY")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.executescript(_SCHEMA)
        fmt = self._meta("format")
        if fmt is not None and fmt != INDEX_FORMAT:
            self.reset()
        self._load()

    # ---- state -----------------------------------------------------------------------

    def _meta(self, key: str) -> object:
        row = self._db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _load(self) -> None:
        self._run_ids: dict[str, int] = {}
        self._run_order: list[str] = []
        for rid, uuid in self._db.execute("SELECT id, uuid FROM runs ORDER BY id"):
            self._run_ids[uuid] = rid
            self._run_order.append(uuid)
        self._flushed_runs = len(self._run_order)
        row = self._db.execute(
            "SELECT seq, seg, off, len, hash FROM lines ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        if row is None:
            self._flushed_next = 0
            self._flushed_head = ZERO_HASH
            self._last: tuple[int, int, int] | None = None
        else:
            self._flushed_next = row[0] + 1
            self._flushed_head = bytes(row[4]).hex()
            self._last = (row[1], row[2], row[3])
        self._pending: list[tuple[int, int, int, int, bytes, int]] = []

    def reset(self) -> None:
        """Forget every row (the index will be rebuilt)."""
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM lines")
        self._db.execute("DELETE FROM runs")
        self._db.execute("DELETE FROM meta")
        self._db.execute("INSERT INTO meta (k, v) VALUES ('format', ?)", (INDEX_FORMAT,))
        self._db.execute("COMMIT")
        self._load()

    @property
    def next_seq(self) -> int:
        """One past the last indexed seq (0 when empty)."""
        return self._flushed_next + len(self._pending)

    @property
    def head(self) -> str:
        """BLAKE3 of the last indexed line, 64 zeros when empty."""
        return self._pending[-1][4].hex() if self._pending else self._flushed_head

    def last_position(self) -> tuple[int, int, int] | None:
        """(segment, offset, length) of the last indexed line, or None when empty."""
        if self._pending:
            p = self._pending[-1]
            return (p[1], p[2], p[3])
        return self._last

    # ---- writing ---------------------------------------------------------------------

    def add(self, seq: int, seg: int, off: int, length: int, digest: str, run: str) -> None:
        """Add the row of a verified line; `seq` must equal `next_seq` (else ValueError)."""
        if seq != self.next_seq:
            raise ValueError(f"index rows must be added in order: got seq {seq}, expected {self.next_seq}")
        rid = self._run_ids.get(run)
        if rid is None:
            rid = len(self._run_order) + 1
            self._run_ids[run] = rid
            self._run_order.append(run)
        self._pending.append((seq, seg, off, length, bytes.fromhex(digest), rid))
        if self.autoflush and len(self._pending) >= FLUSH_ROWS:
            self.flush()

    def add_lines(self, seq: int, seg: int, off: int, lines: Sequence[tuple[int, str, str]]) -> None:
        """Add the rows of consecutive verified lines written together: the first at `seq`
        (must equal `next_seq`, else ValueError) and byte offset `off` of segment `seg`, each
        given as (length in bytes without its newline, BLAKE3 hex, run id); the next line
        starts one byte (the newline) after the previous one. Same rows as `add` per line."""
        if seq != self.next_seq:
            raise ValueError(f"index rows must be added in order: got seq {seq}, expected {self.next_seq}")
        run_ids = self._run_ids
        pending = self._pending
        append = pending.append
        fromhex = bytes.fromhex
        for length, digest, run in lines:
            rid = run_ids.get(run)
            if rid is None:
                rid = len(self._run_order) + 1
                run_ids[run] = rid
                self._run_order.append(run)
            append((seq, seg, off, length, fromhex(digest), rid))
            seq += 1
            off += length + 1
        if self.autoflush and len(pending) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Write pending rows to SQLite in one transaction (no fsync: the index is disposable)."""
        if not self._pending:
            return
        db = self._db
        db.execute("BEGIN")
        new_runs = self._run_order[self._flushed_runs :]
        if new_runs:
            db.executemany(
                "INSERT INTO runs (id, uuid) VALUES (?, ?)",
                [(self._flushed_runs + i + 1, u) for i, u in enumerate(new_runs)],
            )
        db.executemany(
            "INSERT INTO lines (seq, seg, off, len, hash, run) VALUES (?, ?, ?, ?, ?, ?)", self._pending
        )
        db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('format', ?)", (INDEX_FORMAT,))
        db.execute("COMMIT")
        last = self._pending[-1]
        self._flushed_next = last[0] + 1
        self._flushed_head = last[4].hex()
        self._last = (last[1], last[2], last[3])
        self._flushed_runs = len(self._run_order)
        self._pending = []

    def flushed_rows_current(self) -> bool:
        """True when the file still ends where this connection last saw it (nobody else
        flushed rows since), so pending rows can be written without clashing."""
        row = self._db.execute("SELECT MAX(seq) FROM lines").fetchone()
        last = -1 if row is None or row[0] is None else int(row[0])
        return last + 1 == self._flushed_next

    # ---- reading ---------------------------------------------------------------------

    def _pending_entry(self, seq: int) -> tuple[int, int, int, int, bytes, int] | None:
        i = seq - self._flushed_next
        return self._pending[i] if 0 <= i < len(self._pending) else None

    def _hash_at(self, seq: int) -> str:
        if seq < 0:
            return ZERO_HASH
        p = self._pending_entry(seq)
        if p is not None:
            return p[4].hex()
        row = self._db.execute("SELECT hash FROM lines WHERE seq = ?", (seq,)).fetchone()
        return ZERO_HASH if row is None else bytes(row[0]).hex()

    def entry(self, seq: int) -> Entry | None:
        """The row of `seq`, or None when it is not indexed."""
        p = self._pending_entry(seq)
        if p is not None:
            return Entry(seq, p[1], p[2], p[3], p[4].hex(), self._hash_at(seq - 1))
        row = self._db.execute(
            "SELECT l.seg, l.off, l.len, l.hash, p.hash FROM lines l LEFT JOIN lines p ON p.seq = l.seq - 1 "
            "WHERE l.seq = ?",
            (seq,),
        ).fetchone()
        if row is None:
            return None
        prev = ZERO_HASH if row[4] is None else bytes(row[4]).hex()
        return Entry(seq, row[0], row[1], row[2], bytes(row[3]).hex(), prev)

    def run_entries(self, run: str) -> list[Entry]:
        """The rows of one run in seq order ([] for an unknown run)."""
        rid = self._run_ids.get(run)
        if rid is None:
            return []
        out = [
            Entry(seq, seg, off, ln, bytes(h).hex(), ZERO_HASH if ph is None else bytes(ph).hex())
            for seq, seg, off, ln, h, ph in self._db.execute(
                "SELECT l.seq, l.seg, l.off, l.len, l.hash, p.hash FROM lines l "
                "LEFT JOIN lines p ON p.seq = l.seq - 1 WHERE l.run = ? ORDER BY l.seq",
                (rid,),
            )
        ]
        for p in self._pending:
            if p[5] == rid:
                out.append(Entry(p[0], p[1], p[2], p[3], p[4].hex(), self._hash_at(p[0] - 1)))
        return out

    def runs(self) -> list[str]:
        """Every run in order of first appearance, excluding the workspace (nil) run."""
        return [r for r in self._run_order if r != WORKSPACE_RUN]

    def has_run(self, run: str) -> bool:
        return run in self._run_ids

    def discard_and_close(self) -> None:
        """Close without writing pending rows (a reader, or a writer whose batch failed)."""
        self._pending = []
        self._db.close()

    def close(self) -> None:
        """Flush (when file-backed) and close the SQLite connection."""
        try:
            if self.path is not None:
                self.flush()
        finally:
            self._db.close()
