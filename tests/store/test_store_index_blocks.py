"""The block-row index (DESIGN.md §3 "Index"): one SQLite row per
block of seqs and one per run per run flush, checked against a plain in-memory model.

A hypothesis property drives a file-backed `LedgerIndex` with random adds, flushes, closes,
crashes (close without flushing), reopens and resets over a few runs, with blocks of a few seqs
so examples cross block boundaries; an index file of the old format (one row per line) is
dropped and rebuilt; a hand-damaged block or run list is caught by a read through `Ledger` and
the index rebuilt, never answered with a wrong line.
"""

from __future__ import annotations

import random
import sqlite3
import sys
import tempfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.canonical import chain_hash
from runfold.core.ids import WORKSPACE_RUN, ZERO_HASH
from runfold.core.records import Draft
from runfold.store.index_file import INDEX_FILE, INDEX_FORMAT, Entry, LedgerIndex
from runfold.store.layout import Layout
from runfold.store.ledger import Ledger

RUNS = ["r1", "r2", "r3", WORKSPACE_RUN]


@dataclass
class Model:
    """What the index must answer: every row added, and how many of them a crash keeps."""

    rows: list[Entry] = field(default_factory=list)
    runs: dict[int, str] = field(default_factory=dict)
    durable: int = 0
    """Rows written to the file (a flush of either kind, or a close)."""

    def add(self, seg: int, off: int, length: int, run: str) -> tuple[int, str]:
        seq = len(self.rows)
        digest = chain_hash(f"{seq}:{seg}:{off}:{length}:{run}".encode())
        prev = self.rows[-1].hash if self.rows else ZERO_HASH
        self.rows.append(Entry(seq, seg, off, length, digest, prev))
        self.runs[seq] = run
        return seq, digest

    def truncate(self, n: int) -> None:
        del self.rows[n:]
        for s in [s for s in self.runs if s >= n]:
            del self.runs[s]

    def run_order(self) -> list[str]:
        return [r for r in dict.fromkeys(self.runs[s] for s in range(len(self.rows))) if r != WORKSPACE_RUN]


def check(idx: LedgerIndex, m: Model) -> None:
    n = len(m.rows)
    assert idx.next_seq == n
    assert idx.head == (m.rows[-1].hash if m.rows else ZERO_HASH)
    assert idx.last_position() == ((m.rows[-1].seg, m.rows[-1].off, m.rows[-1].len) if m.rows else None)
    assert [idx.entry(s) for s in range(n)] == m.rows
    assert idx.entry(n) is None and idx.entry(-1) is None
    assert idx.runs() == m.run_order()
    for run in RUNS:
        assert idx.run_entries(run) == [e for e in m.rows if m.runs[e.seq] == run]
        assert idx.has_run(run) == (run in m.runs.values())
    assert idx.run_entries("never") == [] and not idx.has_run("never")


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 300), st.sampled_from(RUNS), st.booleans()),
        st.tuples(
            st.just("lines"),
            st.lists(st.tuples(st.integers(1, 300), st.sampled_from(RUNS)), min_size=1, max_size=12),
            st.booleans(),
        ),
        st.just(("flush", True)),
        st.just(("flush", False)),
        st.just(("close",)),
        st.just(("crash",)),
        st.just(("reset",)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=ops,
    block_rows=st.sampled_from([1, 2, 3, 5]),
    flush_rows=st.integers(1, 9),
    run_flush_rows=st.integers(1, 20),
)
def test_index_answers_like_a_plain_model(
    steps: list[tuple[object, ...]], block_rows: int, flush_rows: int, run_flush_rows: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / INDEX_FILE

        def open_index() -> LedgerIndex:
            idx = LedgerIndex(path, block_rows=block_rows)
            idx.flush_rows, idx.run_flush_rows = flush_rows, run_flush_rows
            return idx

        idx = open_index()
        m = Model()
        seg, off = 0, 0

        def after_flushes() -> None:
            # an automatic flush may have run: what it wrote survives a crash
            m.durable = max(m.durable, idx._flushed_next)

        for step in steps:
            kind = step[0]
            if kind == "add":
                _, length, run, roll = step
                assert isinstance(length, int) and isinstance(run, str)
                if roll:
                    seg, off = len(m.rows), 0
                seq, digest = m.add(seg, off, length, run)
                idx.add(seq, seg, off, length, digest, run)
                off += length + 1
                after_flushes()
            elif kind == "lines":
                _, batch, roll = step
                assert isinstance(batch, list)
                if roll:
                    seg, off = len(m.rows), 0
                first, start = len(m.rows), off
                rows = []
                for length, run in batch:
                    _, digest = m.add(seg, off, length, run)
                    rows.append((length, digest, run))
                    off += length + 1
                idx.add_lines(first, seg, start, rows)
                after_flushes()
            elif kind == "flush":
                idx.flush(full=bool(step[1]))
                m.durable = len(m.rows)
            elif kind == "close":
                idx.close()
                m.durable = len(m.rows)
                idx = open_index()
            elif kind == "crash":  # the process died: rows not flushed are lost
                idx.discard_and_close()
                m.truncate(m.durable)
                idx = open_index()
                if m.rows:
                    seg, off = m.rows[-1].seg, m.rows[-1].off + m.rows[-1].len + 1
                else:
                    seg, off = 0, 0
            else:
                idx.reset()
                m = Model()
                seg, off = 0, 0
            check(idx, m)
        idx.close()
        check(reopened := LedgerIndex(path, block_rows=block_rows), m)
        reopened.close()
        with pytest.raises(ValueError):
            LedgerIndex(None).add(1, 0, 0, 1, ZERO_HASH, "r1")
        with pytest.raises(ValueError):
            LedgerIndex(None).add_lines(0, 0, 0, [(1, "abc", "r1")])


def test_a_file_of_another_block_size_is_reset(tmp_path: Path) -> None:
    path = tmp_path / INDEX_FILE
    idx = LedgerIndex(path, block_rows=4)
    idx.add_lines(0, 0, 0, [(5, chain_hash(b"x"), "r1")] * 9)
    idx.close()
    assert LedgerIndex(path, block_rows=4).next_seq == 9
    assert LedgerIndex(path, block_rows=8).next_seq == 0  # another layout: start again


RUN_IDS = [f"0190f6a2-7c4a-7bbb-9d1e-{i:012x}" for i in range(5)]


def build(ws: Path, lines: int, batch: int = 37) -> None:
    rng = random.Random(5)
    with Ledger.create(ws, segment_bytes=40_000) as w:
        done = 1
        while done < lines:
            k = min(batch, lines - done)
            w.append(
                [
                    Draft(
                        rng.choice(RUN_IDS),
                        "lab/room1",
                        "steer_received",
                        {"source": "user", "text": f"{done + i}"},
                    )
                    for i in range(k)
                ]
            )
            done += k


def by_scan(ws: Path) -> dict[str, list[bytes]]:
    with Ledger.open(ws, writer=False) as r:
        out: dict[str, list[bytes]] = {}
        for rec in r.records():
            out.setdefault(rec.run, []).append(rec.raw)
        return out


def index_db(ws: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(Layout(ws).index_dir / INDEX_FILE), isolation_level=None)


def test_an_index_of_the_old_format_is_dropped_and_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, 300)
    expected = by_scan(tmp_path)
    # write a format-1 index (one row per line) that claims the ledger's real rows
    path = Layout(tmp_path).index_dir / INDEX_FILE
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    db = sqlite3.connect(str(path), isolation_level=None)
    db.executescript(
        """
        CREATE TABLE meta (k TEXT PRIMARY KEY, v);
        CREATE TABLE runs (id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE);
        CREATE TABLE lines (seq INTEGER PRIMARY KEY, seg INTEGER NOT NULL, off INTEGER NOT NULL,
          len INTEGER NOT NULL, hash BLOB NOT NULL, run INTEGER NOT NULL);
        CREATE INDEX lines_by_run ON lines (run, seq);
        INSERT INTO meta VALUES ('format', 1);
        INSERT INTO lines VALUES (0, 0, 0, 10, zeroblob(32), 1);
        """
    )
    db.close()
    assert INDEX_FORMAT != 1
    with Ledger.open(tmp_path, writer=False) as r:
        assert {run: [x.raw for x in r.run_records(run)] for run in expected} == expected
        assert r.record_at(150).seq == 150
    db = index_db(tmp_path)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    fmt = db.execute("SELECT v FROM meta WHERE k = 'format'").fetchone()
    blocks = db.execute("SELECT count(*) FROM blocks").fetchone()[0]
    db.close()
    assert "lines" not in tables and fmt == (INDEX_FORMAT,) and blocks > 0  # the reader rebuilt and saved it
    # and a writer opens the rebuilt file as is
    with Ledger.open(tmp_path, writer=True) as w:
        assert {run: [x.raw for x in w.run_records(run)] for run in expected} == expected


def _damage_block(ws: Path, seq: int, part: str) -> None:
    db = index_db(ws)
    first = seq - seq % 64
    (blob,) = db.execute("SELECT rows FROM blocks WHERE first_seq = ?", (first,)).fetchone()
    blob = bytearray(blob)
    n = (len(blob) - 32) // 56
    i = seq - first
    if part == "hash":  # one byte of the row's own hash
        blob[32 + 24 * n + 32 * i] ^= 0x01
    elif part == "prev":  # the block's header: the hash of the line before it
        blob[0] ^= 0x80
    elif part == "offset":  # points into the middle of another line
        at = 32 + 8 * n + 8 * i
        blob[at : at + 8] = (int.from_bytes(blob[at : at + 8], sys.byteorder, signed=True) + 3).to_bytes(
            8, sys.byteorder, signed=True
        )
    else:  # a BLOB of the wrong size
        blob = blob[:-7]
    db.execute("UPDATE blocks SET rows = ? WHERE first_seq = ?", (bytes(blob), first))
    db.close()


@pytest.mark.parametrize("part", ["hash", "prev", "offset", "size"])
def test_a_damaged_block_is_caught_and_the_index_rebuilt(tmp_path: Path, part: str) -> None:
    build(tmp_path, 400)
    expected = by_scan(tmp_path)
    Ledger.open(tmp_path, writer=False).close()
    seq = 128 if part == "prev" else 131  # the first seq of a block, or one inside it
    with Ledger.open(tmp_path, writer=False) as r:
        good = r.record_at(seq)
    _damage_block(tmp_path, seq, part)
    with Ledger.open(tmp_path, writer=False) as r:
        got = r.record_at(seq)
        assert got.raw == good.raw and got.hash == good.hash
        assert {run: [x.raw for x in r.run_records(run)] for run in expected} == expected
    _damage_block(tmp_path, seq, part)
    with Ledger.open(tmp_path, writer=False) as r:  # the same through one run's lines
        assert [x.raw for x in r.run_records(good.run)] == expected[good.run]
    with Ledger.open(tmp_path, writer=False) as r:  # the rebuilt index was saved, and is right
        e = r._index.entry(seq)
        assert e is not None and e.hash == good.hash


def test_a_damaged_run_list_is_caught_and_the_index_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, 400)
    expected = by_scan(tmp_path)
    Ledger.open(tmp_path, writer=False).close()
    db = index_db(tmp_path)
    rid, first, blob = db.execute("SELECT run, first_seq, seqs FROM run_seqs LIMIT 1").fetchone()
    seqs = array("q", blob)
    other = db.execute("SELECT seqs FROM run_seqs WHERE run != ? LIMIT 1", (rid,)).fetchone()[0]
    seqs[len(seqs) // 2] = array("q", other)[0]  # a seq of another run, in place of one of ours
    db.execute("UPDATE run_seqs SET seqs = ? WHERE run = ? AND first_seq = ?", (seqs.tobytes(), rid, first))
    db.close()
    with Ledger.open(tmp_path, writer=False) as r:
        assert {run: [x.raw for x in r.run_records(run)] for run in expected} == expected


def test_a_reader_during_a_write_rebuilds_run_lists_from_blocks(tmp_path: Path) -> None:
    """The writer's automatic flushes write blocks every FLUSH_ROWS rows but run lists only every
    RUN_FLUSH_ROWS: a reader opening meanwhile takes the missing run lists from the blocks."""
    build(tmp_path, 50)
    with Ledger.open(tmp_path, writer=True) as w:
        for b in range(150):
            w.append(
                [
                    Draft(
                        RUN_IDS[(b + i) % 5],
                        "lab/room1",
                        "steer_received",
                        {"source": "user", "text": f"{b}.{i}"},
                    )
                    for i in range(37)
                ]
            )
        db = index_db(tmp_path)
        (runs_next,) = db.execute("SELECT v FROM meta WHERE k = 'runs_next'").fetchone()
        (blocks,) = db.execute("SELECT count(*) FROM blocks").fetchone()
        db.close()
        assert runs_next < blocks * 64  # blocks ahead of the run lists
        expected = by_scan(tmp_path)
        with Ledger.open(tmp_path, writer=False) as r:
            assert r.next_seq == w.next_seq
            assert {run: [x.raw for x in r.run_records(run)] for run in expected} == expected
