"""The disposable ledger index file: seq → (segment, offset, length, hash), run → its seqs (DESIGN.md §3).

It lets "the line at seq S" and "the lines of run R" cost the size of the answer instead of a
scan. It is a SQLite file under `.runfold/index/` that can be deleted at any time;
`runfold.store.index.Index` checks it against the ledger on open and rebuilds or extends it from
verified lines only. SQLite holds
one row per block of `block_rows` consecutive seqs (fixed-width columns packed in a BLOB) and one
row per run per run flush (its seqs packed), never one row per line: writing the index costs a
few SQLite rows per thousand lines. The byte layout of those BLOBs lives in
`runfold.store.index_blocks`; this module owns the SQLite file and the flush policy.

How reads stay verified without a scan: a row is only ever written for a line that passed the
chain check (a full or catch-up scan, or the writer's own fsynced append), and it stores that
line's BLAKE3. A read through the index re-checks the line with `LineChecker` started at the
stored hash of the line before it (so `prev`, `seq`, canonical bytes and kind are checked) and
compares the line's own BLAKE3 with its stored hash. A line changed on disk after indexing
therefore fails the read; only a ledger and index rewritten together escape it, which a full
`verify` (or a writer's open) still catches. Damage to the index file itself either names a line
whose check then fails (the same path), or makes the file contradict itself, which reads report
as `IndexMismatch`; `Index.rebuild` answers both by rebuilding the index from the ledger.
"""

from __future__ import annotations

import sqlite3
import sys
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate, count
from pathlib import Path
from typing import NamedTuple, cast

from runfold.core.ids import WORKSPACE_RUN
from runfold.store.index_blocks import (
    BLOCK_ROWS,
    HASH_BYTES,
    ZERO_PREV,
    Block,
    Entry,
    IndexMismatch,
    blob_entry,
    pack_blocks,
    pack_seqs,
    read_row,
    rows_claimed,
    rows_in,
    unpack_seqs,
)

INDEX_FORMAT = 3
"""Bumped when the schema changes; an index of another format is dropped and rebuilt.
1: one SQLite row per line. 2: one row per block of seqs, one row per run per run flush.
3: as 2, and each run's count of seqs in `run_seqs` (a run list that lost a seq is caught)."""
INDEX_FILE = "index.sqlite"
FLUSH_ROWS = 4096
"""Rows not yet in SQLite that trigger an automatic flush of their blocks (and on close)."""
RUN_FLUSH_ROWS = 1 << 15
"""Rows whose run lists (`run_seqs`) an automatic flush lets accumulate before writing them:
one `run_seqs` row per run touched, so rarer run flushes mean fewer, longer rows. Blocks carry
each row's run, so a reader rebuilds the lists of these rows from blocks, not from the ledger."""
SCAN_FLUSH_ROWS = 1 << 18
"""The `flush_rows` `Index` sets while it rebuilds or extends the index from a scan (about
15 MiB held): fewer, larger flushes write fewer `run_seqs` rows when a scan meets many runs."""
PAGE_BYTES = 16384
"""SQLite page size of a new index file: fewer, larger pages per flush (measured: about 15%
less flush time than 4 KiB pages)."""


class Rows(NamedTuple):
    """Index rows of consecutive lines built by `LedgerIndex.rows_for`, in the stored form of
    `Block`, for `LedgerIndex.add_rows`."""

    seq: int
    """The seq of the first row."""
    runs_known: int
    """How many runs the index listed when the rows were built (`rids` past it are new)."""
    seg: int
    offs: list[int]
    lens: Sequence[int]
    rids: list[int]
    hashes: bytes
    new_runs: list[str]
    """Runs first seen in these rows, in the order of their new ids."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v);
CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, n INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS blocks (first_seq INTEGER PRIMARY KEY, rows BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS run_seqs (
  run INTEGER NOT NULL, first_seq INTEGER NOT NULL, seqs BLOB NOT NULL, PRIMARY KEY (run, first_seq)
) WITHOUT ROWID;
"""
_TABLES = ("meta", "runs", "blocks", "run_seqs")


class LedgerIndex:
    """Index rows in SQLite plus rows held in memory (the partial last block, rows not yet
    flushed, and the run lists of rows not yet in `run_seqs`).

    `path` None keeps everything in an in-memory SQLite (a reader that may not write the index).
    Rows must be added in seq order starting at `next_seq`. `block_rows` (seqs per block row,
    default `BLOCK_ROWS`) is recorded in the file; a file written with another value is reset.
    """

    def __init__(self, path: Path | None, *, block_rows: int = BLOCK_ROWS) -> None:
        if block_rows < 1:
            raise ValueError(f"block_rows must be positive, got {block_rows}")
        self.path = path
        self.block_rows = block_rows
        self.autoflush = path is not None
        """Flush every `flush_rows` rows; a reader turns it off unless it holds the index lock."""
        self.flush_rows = FLUSH_ROWS
        """Rows not yet in SQLite that trigger an automatic flush (default `FLUSH_ROWS`)."""
        self.run_flush_rows = RUN_FLUSH_ROWS
        """Rows an automatic flush lets accumulate before it writes their run lists."""
        self._db = self._connect()
        if self._meta("format") not in (None, INDEX_FORMAT) or not self._only_our_tables():
            self._start_over()
        self._db.executescript(_SCHEMA)
        if (
            self._meta("format") is None
            or (self._meta("block_rows"), self._meta("byteorder")) != (block_rows, sys.byteorder)
            or not self._load()
        ):
            self.reset()

    # ---- state -----------------------------------------------------------------------

    def _meta(self, key: str) -> object:
        try:
            row = self._db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        except sqlite3.OperationalError:  # no meta table (a new file)
            return None
        return None if row is None else row[0]

    def _only_our_tables(self) -> bool:
        """False when the file holds a table this format does not have (an older format)."""
        names = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return names <= set(_TABLES)

    def _connect(self) -> sqlite3.Connection:
        # not bound to its thread: a writer's flush may run on the ledger's sync helper, one
        # user at a time (`runfold.store.while_syncing`)
        db = sqlite3.connect(
            ":memory:" if self.path is None else str(self.path), isolation_level=None, check_same_thread=False
        )
        db.execute(f"PRAGMA page_size={PAGE_BYTES}")  # takes effect only in a new file
        db.execute("PRAGMA journal_mode=WAL" if self.path is not None else "PRAGMA journal_mode=MEMORY")
        db.execute("PRAGMA synchronous=OFF")
        return db

    def _start_over(self) -> None:
        """Replace an index of another format with a new file (its rows are worthless here, and
        a new file gets this format's page size and none of the old file's space)."""
        self._db.close()
        if self.path is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self._db = self._connect()

    def _load(self) -> bool:
        """Read the runs, the last block and the run lists not yet in `run_seqs` into memory, as
        one snapshot; False when the file contradicts itself (the caller resets it)."""
        self._run_ids: dict[str, int] = {}
        self._run_order: list[str] = []
        # rows held in memory: seqs [_base, next_seq), _base a multiple of block_rows
        self._base = 0
        self._base_prev = ZERO_PREV
        """The hash of seq _base - 1 (zeros when _base is 0)."""
        self._last: tuple[int, int, int] | None = None
        """(segment, offset, length) of seq _base - 1, None when _base is 0."""
        self._segs: list[int] = []
        self._offs: list[int] = []
        """Offset minus seq of each held row (the stored form, see `Block`)."""
        self._lens: list[int] = []
        self._rids: list[int] = []
        self._hashes = bytearray()
        self._flushed_next = 0
        """Blocks in SQLite cover seqs [0, _flushed_next)."""
        self._runs_next = 0
        """`run_seqs` in SQLite covers seqs [0, _runs_next); _runs_next <= _flushed_next."""
        self._groups: dict[str, list[int]] = {}
        """The seqs of each run in [_runs_next, _flushed_next), ascending (rows flushed to
        blocks whose run lists are not in `run_seqs` yet)."""
        db = self._db
        db.execute("BEGIN")  # one snapshot: everything as one flush left it
        try:
            for rid, uuid in db.execute("SELECT id, uuid FROM runs ORDER BY id"):
                self._run_ids[uuid] = rid
                self._run_order.append(uuid)
            self._flushed_runs = len(self._run_order)
            if self._run_order and max(self._run_ids.values()) != len(self._run_order):
                return False
            runs_next = self._meta("runs_next")
            row = db.execute("SELECT first_seq, rows FROM blocks ORDER BY first_seq DESC LIMIT 1").fetchone()
            if row is None:
                return runs_next in (None, 0)
            first = int(row[0])
            block = Block(first, bytes(row[1]))
            end = first + block.n
            if first % self.block_rows or block.n > self.block_rows:
                return False
            if not isinstance(runs_next, int) or not 0 <= runs_next <= end:
                return False
            self._flushed_next = end
            self._runs_next = runs_next
            if block.n == self.block_rows:
                self._base = end
                self._base_prev = block.hashes[-HASH_BYTES:]
                self._last = (block.segs[-1], block.offs[-1] + end - 1, block.lens[-1])
            else:
                self._base = first
                self._base_prev = block.prev
                self._segs, self._offs = block.segs.tolist(), block.offs.tolist()
                self._lens, self._rids = block.lens.tolist(), block.rids.tolist()
                self._hashes = bytearray(block.hashes)
            self._groups = self._run_lists(runs_next, end)
            return True
        except IndexMismatch:
            return False
        finally:
            db.execute("COMMIT")

    def _run_lists(self, start: int, end: int) -> dict[str, list[int]]:
        """The seqs of each run in [start, end), read from the block rows (and held rows).
        Raises `IndexMismatch` when a block is missing, malformed or names an unknown run."""
        groups: dict[str, list[int]] = {}
        b = self.block_rows
        stored_end = min(end, self._base)
        if start < stored_end:
            expect = start - start % b
            for first, blob in self._db.execute(
                "SELECT first_seq, rows FROM blocks WHERE first_seq >= ? AND first_seq < ? ORDER BY first_seq",
                (expect, stored_end),
            ):
                blk = Block(first, bytes(blob))
                if first != expect or blk.n != b:
                    raise IndexMismatch(f"block at seq {expect} is missing or short")
                lo = max(start, first) - first
                self._group(groups, first + lo, blk.rids[lo : min(stored_end - first, b)])
                expect += b
            if expect < stored_end:
                raise IndexMismatch(f"block at seq {expect} is missing")
        if end > self._base:
            lo = max(start, self._base)
            self._group(groups, lo, self._rids[lo - self._base : end - self._base])
        return groups

    def _group(self, groups: dict[str, list[int]], first: int, rids: Sequence[int]) -> None:
        """Add the seqs first, first+1, ... to the lists of their runs (`rids[i]` is the run id
        of seq first+i). Raises `IndexMismatch` for a run id the index does not list."""
        by_id: dict[int, list[int]] = {}
        get = by_id.get
        for s, rid in zip(count(first), rids, strict=False):
            g = get(rid)
            if g is None:
                by_id[rid] = [s]
            else:
                g.append(s)
        order = self._run_order
        for rid, seqs in by_id.items():
            if not 0 < rid <= len(order):
                raise IndexMismatch(f"a row names run id {rid}, which the index does not list")
            run = order[rid - 1]
            g = groups.get(run)
            if g is None:
                groups[run] = seqs
            else:
                g += seqs

    def reset(self) -> None:
        """Forget every row (the index will be rebuilt)."""
        db = self._db
        db.execute("BEGIN")
        for table in _TABLES:
            db.execute(f"DELETE FROM {table}")
        db.executemany(
            "INSERT INTO meta (k, v) VALUES (?, ?)",
            [
                ("format", INDEX_FORMAT),
                ("block_rows", self.block_rows),
                ("byteorder", sys.byteorder),
                ("runs_next", 0),
            ],
        )
        db.execute("COMMIT")
        loaded = self._load()
        assert loaded

    @property
    def next_seq(self) -> int:
        """One past the last indexed seq (0 when empty)."""
        return self._base + len(self._lens)

    @property
    def head(self) -> str:
        """BLAKE3 of the last indexed line, 64 zeros when empty."""
        return (self._hashes[-HASH_BYTES:] if self._lens else self._base_prev).hex()

    def last_position(self) -> tuple[int, int, int] | None:
        """(segment, offset, length) of the last indexed line, or None when empty."""
        if self._lens:
            return (self._segs[-1], self._offs[-1] + self.next_seq - 1, self._lens[-1])
        return self._last

    # ---- writing ---------------------------------------------------------------------

    def _new_run(self, run: str) -> int:
        rid = len(self._run_order) + 1
        self._run_ids[run] = rid
        self._run_order.append(run)
        return rid

    def add(self, seq: int, seg: int, off: int, length: int, digest: str, run: str) -> None:
        """Add the row of a verified line: `seq` (must equal `next_seq`), its segment (by first
        seq), byte offset and length (bytes, no newline), BLAKE3 (64 hex) and run id.

        Raises ValueError when `seq` is out of order or `digest` is not 32 bytes of hex."""
        if seq != self.next_seq:
            raise ValueError(f"index rows must be added in order: got seq {seq}, expected {self.next_seq}")
        h = bytes.fromhex(digest)
        if len(h) != HASH_BYTES:
            raise ValueError(f"index row of seq {seq}: hash {digest!r} is not 64 hex digits")
        rid = self._run_ids.get(run) or self._new_run(run)
        self._segs.append(seg)
        self._offs.append(off - seq)
        self._lens.append(length)
        self._rids.append(rid)
        self._hashes += h
        if self.autoflush and self.flush_due():
            self.flush(full=False)

    def add_lines(self, seq: int, seg: int, off: int, lines: Sequence[tuple[int, str, str]]) -> None:
        """Add the rows of consecutive verified lines written together: the first at `seq`
        (must equal `next_seq`, else ValueError) and byte offset `off` of segment `seg`, each
        given as (length in bytes without its newline, BLAKE3 hex, run id); the next line
        starts one byte (the newline) after the previous one. Same rows as `add` per line.
        Raises ValueError when a hash is not 64 hex digits (nothing added)."""
        self.add_rows(self.rows_for(seq, seg, off, lines))
        if self.autoflush and self.flush_due():
            self.flush(full=False)

    def rows_for(self, seq: int, seg: int, off: int, lines: Sequence[tuple[int, str, str]]) -> Rows:
        """The rows `add_lines` would add for `lines` (same arguments, same ValueErrors), built
        without changing the index: `add_rows` adds them, unless rows were added in between."""
        if seq != self.next_seq:
            raise ValueError(f"index rows must be added in order: got seq {seq}, expected {self.next_seq}")
        if not lines:
            return Rows(seq, len(self._run_order), seg, [], (), [], b"", [])
        lens, digests, runs = zip(*lines, strict=True)
        hashes = bytes.fromhex("".join(digests))
        if len(hashes) != HASH_BYTES * len(lens):
            raise ValueError(f"index rows from seq {seq}: a hash is not 64 hex digits")
        found = list(map(self._run_ids.get, runs))
        new_runs: list[str] = []
        if None in found:  # a run seen for the first time: the ids `_new_run` will give
            fresh: dict[str, int] = {}
            first_id = len(self._run_order) + 1
            for i, run in enumerate(runs):
                if found[i] is None:
                    rid = fresh.get(run)
                    if rid is None:
                        rid = fresh[run] = first_id + len(new_runs)
                        new_runs.append(run)
                    found[i] = rid
        offs = list(accumulate(lens[:-1], initial=off - seq))  # off - seq: see Block
        return Rows(seq, len(self._run_order), seg, offs, lens, cast(list[int], found), hashes, new_runs)

    def add_rows(self, rows: Rows) -> None:
        """Add rows built by `rows_for` (no automatic flush: see `flush_due`). Raises
        ValueError when rows were added since they were built (nothing added)."""
        if rows.seq != self.next_seq or rows.runs_known != len(self._run_order):
            raise ValueError(f"index rows were built for seq {rows.seq}; the index is at seq {self.next_seq}")
        for run in rows.new_runs:
            self._new_run(run)
        n = len(rows.lens)
        self._segs += [rows.seg] * n
        self._offs += rows.offs
        self._lens += rows.lens
        self._rids += rows.rids
        self._hashes += rows.hashes

    def flush_due(self) -> bool:
        """True when `flush_rows` rows or more wait to be written (what the automatic flush
        of `add` and `add_lines` asks before flushing with `full=False`)."""
        return self.next_seq - self._flushed_next >= self.flush_rows

    def flush(self, *, full: bool = True) -> None:
        """Write rows not yet in SQLite in one transaction (no fsync: the index is disposable):
        every block they touch, whole (the partial last block is rewritten by the next flush),
        and, when `full` or `run_flush_rows` rows have accumulated, one `run_seqs` row per run
        touched since the last run flush. The automatic flush passes `full=False`."""
        start, end, runs_from = self._flushed_next, self.next_seq, self._runs_next
        fresh: dict[str, list[int]] = {}
        if end > start:
            self._group(fresh, start, self._rids[start - self._base :])
        write_runs = end > runs_from and (full or end - runs_from >= self.run_flush_rows)
        if end == start and not write_runs:
            return
        b = self.block_rows
        base = self._base
        segs, offs, lens, rids, hashes = self._segs, self._offs, self._lens, self._rids, self._hashes
        # held rows start at the partial block holding `start` (base <= start < base + b): the
        # blocks from base to end are written whole (the partial last block again next flush)
        assert 0 <= start - base < b
        blocks = pack_blocks(base, self._base_prev, segs, offs, lens, rids, hashes, b) if end > start else []
        db = self._db
        db.execute("BEGIN")
        try:
            new_runs = self._run_order[self._flushed_runs :]
            if new_runs:
                db.executemany(
                    "INSERT INTO runs (id, uuid) VALUES (?, ?)",
                    [(self._flushed_runs + i + 1, u) for i, u in enumerate(new_runs)],
                )
            if blocks:
                db.executemany("INSERT OR REPLACE INTO blocks (first_seq, rows) VALUES (?, ?)", blocks)
            if write_runs:
                run_ids = self._run_ids
                old = self._groups
                rows = []
                counts = []
                for run in old.keys() | fresh.keys():
                    g = old.get(run, []) + fresh.get(run, [])
                    rows.append((run_ids[run], g[0], pack_seqs(g)))
                    counts.append((len(g), run_ids[run]))
                db.executemany("INSERT INTO run_seqs (run, first_seq, seqs) VALUES (?, ?, ?)", rows)
                db.executemany("UPDATE runs SET n = n + ? WHERE id = ?", counts)
                db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('runs_next', ?)", (end,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._flushed_next = end
        self._flushed_runs = len(self._run_order)
        if write_runs:
            self._runs_next = end
            self._groups = {}
        else:
            groups = self._groups
            for run, seqs in fresh.items():
                known = groups.get(run)
                if known is None:
                    groups[run] = seqs
                else:
                    known += seqs
        keep_from = end - end % b  # keep only the partial last block in memory
        k = keep_from - base
        if k > 0:
            self._base_prev = bytes(hashes[(k - 1) * HASH_BYTES : k * HASH_BYTES])
            self._last = (segs[k - 1], offs[k - 1] + keep_from - 1, lens[k - 1])
            del segs[:k], offs[:k], lens[:k], rids[:k], hashes[: k * HASH_BYTES]
            self._base = keep_from

    def flushed_rows_current(self) -> bool:
        """True when the file still ends where this connection last saw it (nobody else
        flushed rows since), so pending rows can be written without clashing."""
        db = self._db
        db.execute("BEGIN")
        try:
            row = db.execute(
                "SELECT first_seq, length(rows) FROM blocks ORDER BY first_seq DESC LIMIT 1"
            ).fetchone()
            runs_next = self._meta("runs_next")
        finally:
            db.execute("COMMIT")
        end = 0 if row is None else int(row[0]) + rows_claimed(int(row[1]))
        return end == self._flushed_next and runs_next == self._runs_next

    # ---- reading ---------------------------------------------------------------------

    def _held_entry(self, seq: int) -> Entry:
        i = seq - self._base
        h = self._hashes
        prev = h[(i - 1) * HASH_BYTES : i * HASH_BYTES] if i else self._base_prev
        return Entry(
            seq,
            self._segs[i],
            self._offs[i] + seq,
            self._lens[i],
            h[i * HASH_BYTES : (i + 1) * HASH_BYTES].hex(),
            prev.hex(),
        )

    def entry(self, seq: int) -> Entry | None:
        """The row of `seq`, or None when it is not indexed. Reads at most one block row.

        Raises `IndexMismatch` when the block holding `seq` is malformed."""
        if seq >= self._base:
            return self._held_entry(seq) if seq < self.next_seq else None
        if seq < 0:
            return None
        first = seq - seq % self.block_rows
        try:  # read the row in place: a few bytes of the block, not its whole BLOB
            blob = self._db.blobopen("blocks", "rows", first, readonly=True)
        except sqlite3.OperationalError:  # no block row there
            return None
        with blob:
            return read_row(blob, first, seq)

    def run_entries(self, run: str, since: int = 0, limit: int | None = None) -> list[Entry]:
        """The rows of one run in seq order ([] for an unknown run), from seq `since` on and at
        most `limit` of them: its `run_seqs` rows, then each block the kept seqs name, read once
        (a page of a long run decodes only that page's rows).

        Raises `IndexMismatch` when the file names a seq its block does not hold, or the run's
        `run_seqs` rows hold another number of seqs than the run's count (a seq or a row lost:
        the lines are read by seq, so nothing else would notice a missing one), a damaged
        index, or one reset by another process under this reader."""
        rid = self._run_ids.get(run)
        if rid is None:
            return []
        runs_next = self._runs_next
        base = self._base
        b = self.block_rows
        seqs = array("q")
        blocks: dict[int, tuple[bytes, int]] = {}
        db = self._db
        db.execute("BEGIN")
        try:
            for (blob,) in db.execute(
                "SELECT seqs FROM run_seqs WHERE run = ? AND first_seq < ? ORDER BY first_seq",
                (rid, runs_next),
            ):
                unpack_seqs(seqs, blob, run)
            row = db.execute("SELECT n FROM runs WHERE id = ?", (rid,)).fetchone()
            counted = row[0] if row is not None else 0 if rid > self._flushed_runs else None
            # the count covers every run list in the file: compare it only while nobody else
            # has written run lists since this connection loaded (None: the run has vanished)
            if counted != len(seqs) and (counted is None or self._meta("runs_next") == runs_next):
                raise IndexMismatch(
                    f"run {run}: its seq lists hold {len(seqs)} seqs, the index counted {counted}"
                )
            seqs.extend(self._groups.get(run, ()))
            start = self._flushed_next
            seqs.extend(s for s, r in zip(count(start), self._rids[start - base :], strict=False) if r == rid)
            if since > 0:
                seqs = seqs[bisect_left(seqs, since) :]
            if limit is not None:
                seqs = seqs[:limit]
            wanted = sorted({s - s % b for s in seqs if s < base})
            for i in range(0, len(wanted), 500):
                part = wanted[i : i + 500]
                marks = ",".join("?" * len(part))
                for first, blob in db.execute(
                    f"SELECT first_seq, rows FROM blocks WHERE first_seq IN ({marks})", part
                ):
                    blocks[first] = (blob, rows_in(first, len(blob)))
        finally:
            db.execute("COMMIT")
        out: list[Entry] = []
        last = -1
        for s in seqs:
            if s <= last or s >= self.next_seq:
                raise IndexMismatch(f"run {run}: seq {s} listed after seq {last} or past the end")
            last = s
            if s >= base:
                out.append(self._held_entry(s))
                continue
            first = s - s % b
            blk = blocks.get(first)
            if blk is None or s - first >= blk[1]:
                raise IndexMismatch(f"run {run}: seq {s} is missing from its block")
            out.append(blob_entry(first, blk[0], blk[1], s - first))
        return out

    def runs(self) -> list[str]:
        """Every run in order of first appearance, excluding the workspace (nil) run."""
        return [r for r in self._run_order if r != WORKSPACE_RUN]

    def has_run(self, run: str) -> bool:
        return run in self._run_ids

    def discard_and_close(self) -> None:
        """Close without writing pending rows (a reader, or a writer whose batch failed)."""
        self._groups = {}
        self._db.close()

    def close(self) -> None:
        """Flush (when file-backed) and close the SQLite connection."""
        try:
            if self.path is not None:
                self.flush()
        finally:
            self._db.close()


__all__ = [
    "BLOCK_ROWS",
    "FLUSH_ROWS",
    "INDEX_FILE",
    "INDEX_FORMAT",
    "PAGE_BYTES",
    "RUN_FLUSH_ROWS",
    "SCAN_FLUSH_ROWS",
    "Entry",
    "IndexMismatch",
    "LedgerIndex",
]
