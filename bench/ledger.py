"""Benchmark of the file ledger: durable appends next to SQLite, verify throughput next
to raw BLAKE3, and one run's lines through the index next to a full scan.

Usage: python bench/ledger.py [--quick]. Prints one table and a legend; the 1,000,000-line ledger
of part (c) is cached under /tmp/runfold-bench-1m (rebuilt when its size or format version differs
from this build's; delete it to rebuild).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import blake3

from runfold.core.canonical import FORMAT_VERSION
from runfold.core.records import Draft
from runfold.store.ledger import Ledger
from runfold.store.verify import CHUNK_BYTES, verify_path

RUN_FMT = "0190f6a2-7c4a-7bbb-9d1e-{:012x}"


def draft(i: int, runs: int = 100) -> Draft:
    return Draft(
        RUN_FMT.format(i % runs),
        "lab/room1",
        "tool_result",
        {
            "tool_use_id": f"toolu_{i:08d}",
            "name": "read_file",
            "result": {"text": f"line {i}: the quick brown fox jumps over the lazy dog", "lines": [i, i + 1]},
            "took_us": 1200 + i % 97,
        },
        addr="lab/room1",
    )


class Appends(NamedTuple):
    """Part (a) at one batch size, each in lines/s made durable."""

    runfold: float
    """`Ledger.append` (stage: checks, canonical bytes, chain hashes; flush: write, fsync, index)."""
    sqlite: float
    """SQLite (WAL, synchronous=FULL) BEGIN/executemany/COMMIT of the same line bytes."""
    runfold_with_drafts: float
    """runfold counting the building of its drafts too."""
    bare: float
    """The floor of any file appender: one pwrite + fdatasync of the same finished bytes per
    batch, appended to a plain file (no checks, no hashing, no index)."""
    staging_us: float
    """runfold's staging CPU per line, in µs (the part of `append` before its write)."""


def bench_appends(root: Path, batch: int, batches: int) -> Appends:
    """Durable lines/s for runfold, for SQLite (WAL, synchronous=FULL, one transaction per batch)
    and for a bare append of the same line bytes. The three alternate batch by batch (runfold
    appends batch k, then SQLite inserts batch k's bytes, then the bare file takes them), so all
    see the same disk and CPU conditions on a shared machine. Each side's time counts only its
    own storage call, on input made before its clock starts: runfold's `stage(drafts)` +
    `flush()` (what `append` is), SQLite's BEGIN/executemany/COMMIT of the finished line bytes,
    the bare side's pwrite + fdatasync of them."""
    ws = root / f"append-{batch}"
    db = sqlite3.connect(str(root / f"append-{batch}.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE lines (seq INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    bare_fd = os.open(root / f"append-{batch}.bare", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sync = getattr(os, "fdatasync", os.fsync)
    runfold_s = staging_s = sqlite_s = drafts_s = bare_s = 0.0
    seq = bare_size = 0
    try:
        with Ledger.create(ws) as w:
            for b in range(batches):
                t0 = time.perf_counter()
                drafts = [draft(b * batch + i) for i in range(batch)]
                t1 = time.perf_counter()
                recs = w.stage(drafts)
                t2 = time.perf_counter()
                w.flush()
                runfold_s += time.perf_counter() - t1
                staging_s += t2 - t1
                drafts_s += t1 - t0
                lines = [r.raw for r in recs]
                t0 = time.perf_counter()
                db.execute("BEGIN")
                db.executemany(
                    "INSERT INTO lines VALUES (?, ?)", [(seq + k, line) for k, line in enumerate(lines)]
                )
                db.execute("COMMIT")
                sqlite_s += time.perf_counter() - t0
                seq += len(lines)
                buf = b"\n".join([*lines, b""])
                t0 = time.perf_counter()
                os.pwrite(bare_fd, buf, bare_size)
                sync(bare_fd)
                bare_s += time.perf_counter() - t0
                bare_size += len(buf)
    finally:
        os.close(bare_fd)
        db.close()
    n = batch * batches
    return Appends(n / runfold_s, n / sqlite_s, n / (runfold_s + drafts_s), n / bare_s, staging_s / n * 1e6)


def build(ws: Path, lines: int, runs: int, batch: int = 10_000) -> None:
    with Ledger.create(ws) as w:
        done = 1
        while done < lines:
            k = min(batch, lines - done)
            w.append([draft(done + i, runs) for i in range(k)])
            done += k


def cache_key(lines: int, runs: int) -> str:
    """What the marker file of a cached ledger must hold for it to be reused: its size and the
    format version of its lines (a ledger left by another build is rebuilt, not measured)."""
    return f"{lines} lines, {runs} runs, format {FORMAT_VERSION}\n"


def cached_ledger(big: Path, lines: int, runs: int) -> str:
    """Build the ledger of part (c) in `big` unless a ledger with the same `cache_key` is there;
    returns a note saying which (shown under the table)."""
    marker = big / "built"
    key = cache_key(lines, runs)
    if marker.exists() and marker.read_text() == key:
        return f"part (c) reused the ledger cached in {big} ({key.strip()}; delete it to rebuild)"
    shutil.rmtree(big, ignore_errors=True)
    t0 = time.perf_counter()
    build(big, lines, runs)
    marker.write_text(key)
    return f"part (c) built {lines:,} lines in {big} in {time.perf_counter() - t0:.0f} s (cached for the next run)"


APPEND_GOALS = {1: 1.0, 10: 1.0, 100: 0.8}
"""Durable appends against SQLite, per batch size: batch 1 at least SQLite, batch 100 at least 0.8x
(a batch of 100 pays SQLite's one WAL fsync against runfold's checks, hashes and index rows)."""


def verdict(ratio: float, goal: float, unit: str = "") -> str:
    """The goal cell: `>= goal`, then whether this run met it."""
    return f">= {goal:g}{unit}: {'met' if ratio >= goal else 'MISSED'}"


LEGEND = """\
(a) lines/s made durable (fsync'd) by Ledger.append, next to SQLite (WAL, synchronous=FULL) inserting
    the same line bytes, one transaction per batch; ratio = runfold / SQLite (in parentheses: runfold
    also paying for building its drafts). Goals: >= 1.0 at batches of 1 and 10, >= 0.8 at 100.
    floor: the same bytes appended to a plain file with one pwrite + fdatasync per batch, no checks,
    hashes or index: no append-only file can beat it, so floor / SQLite is the ceiling of (a)'s ratio
    on this disk. staging: runfold's CPU per line before its write (checks, canonical bytes, hashes).
(b) `runfold verify` MB/s (parse, canonical bytes, chain, seq, kind of every line) next to BLAKE3 of
    each line of the same file read in the same chunks (the hashing floor); ratio = verify / BLAKE3.
    Goal >= 0.3.
(c) time to read one run's lines through the index next to a full scan of the ledger; ratio = scan /
    index (in parentheses: the index also paying for opening the ledger). The first open after
    another build may rebuild the disposable index; it is shown apart. Goal >= 100x.
The goals are the ledger's; wall times on a shared machine vary run to run (a ratio near 1.0 can fall either
side)."""


def raw_blake3(path: Path) -> tuple[int, float]:
    """Read the file in the same chunks as verify and BLAKE3 each line; (bytes, seconds)."""
    t0 = time.perf_counter()
    total = 0
    with open(path, "rb") as f:
        rest = b""
        while chunk := f.read(CHUNK_BYTES):
            parts = (rest + chunk).split(b"\n")
            rest = parts.pop()
            for line in parts:
                blake3.blake3(line).digest()
            total += len(chunk)
    return total, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds, not minutes)")
    args = ap.parse_args()
    quick = args.quick
    rows: list[tuple[str, str, str, str, str]] = []
    floors: list[tuple[str, str, str, str, str]] = []
    tmp = Path(tempfile.mkdtemp(prefix="runfold-bench-"))
    try:
        # (a) durable appends
        for batch, batches in (
            (1, 100 if quick else 500),
            (10, 50 if quick else 300),
            (100, 20 if quick else 100),
        ):
            a = bench_appends(tmp, batch, batches)
            rows.append(
                (
                    f"(a) durable appends, batch {batch}",
                    f"{a.runfold:,.0f} lines/s ({a.runfold_with_drafts:,.0f} building drafts too)",
                    f"SQLite {a.sqlite:,.0f} lines/s",
                    f"{a.runfold / a.sqlite:.2f} ({a.runfold_with_drafts / a.sqlite:.2f})",
                    verdict(a.runfold / a.sqlite, APPEND_GOALS[batch]),
                )
            )
            floors.append(
                (
                    f"    floor, batch {batch}",
                    f"bare write+fdatasync {a.bare:,.0f} lines/s; staging {a.staging_us:.1f} us/line",
                    f"SQLite {a.sqlite:,.0f} lines/s",
                    f"{a.bare / a.sqlite:.2f}",
                    "(ceiling of (a))",
                )
            )
        rows += floors
        # (b) verify throughput
        ws = tmp / "verify"
        build(ws, 20_000 if quick else 200_000, 100)
        report = verify_path(ws)
        seg = Ledger.open(ws, writer=False)
        seg_path = seg.segments()[0]
        seg.close()
        nbytes, secs = raw_blake3(seg_path)
        rows.append(
            (
                f"(b) verify {report.lines:,} lines",
                f"{report.mb_per_s:.1f} MB/s",
                f"BLAKE3 per line {nbytes / 1e6 / secs:.1f} MB/s",
                f"{report.mb_per_s / (nbytes / 1e6 / secs):.2f}",
                verdict(report.mb_per_s / (nbytes / 1e6 / secs), 0.3),
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # (c) one run through the index vs a full scan
    lines, runs = (100_000, 1_000) if quick else (1_000_000, 10_000)
    big = Path(f"/tmp/runfold-bench-{'100k' if quick else '1m'}")
    cache_note = cached_ledger(big, lines, runs)
    target = RUN_FMT.format(runs // 2)
    t0 = time.perf_counter()
    Ledger.open(big, writer=False).close()  # may rebuild an index left by another build
    first_open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    reader = Ledger.open(big, writer=False)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    via_index = reader.run_records(target)
    index_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    via_scan = [r for r in reader.records() if r.run == target]
    scan_s = time.perf_counter() - t0
    reader.close()
    assert [r.raw for r in via_index] == [r.raw for r in via_scan]
    rows.append(
        (
            f"(c) {len(via_index)} lines of 1 run of {runs:,} in {lines:,}",
            f"index {index_s * 1e3:.1f} ms (+open {open_s * 1e3:.1f} ms; first open {first_open_s * 1e3:.0f} ms)",
            f"full scan {scan_s:.2f} s",
            f"{scan_s / index_s:,.0f}x ({scan_s / (index_s + open_s):,.0f}x with open)",
            verdict(scan_s / index_s, 100, "x"),
        )
    )
    widths = [
        max(len(r[i]) for r in [*rows, ("case", "runfold", "baseline", "ratio", "goal")]) for i in range(5)
    ]
    header = ("case", "runfold", "baseline", "ratio", "goal")
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print()
    print(LEGEND)
    print(cache_note)


if __name__ == "__main__":
    main()
