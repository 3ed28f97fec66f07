"""Benchmark of the file ledger (issue 2): durable appends next to SQLite, verify throughput next
to raw BLAKE3, and one run's lines through the index next to a full scan.

Usage: python bench/ledger.py [--quick]. Prints one table and a legend; the 1,000,000-line ledger
of part (c) is cached under /tmp/runfold-bench-1m (rebuilt when its size or format version differs
from this build's; delete it to rebuild).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

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


def bench_appends(root: Path, batch: int, batches: int) -> tuple[float, float, float]:
    """Durable lines/s for runfold and for SQLite (WAL, synchronous=FULL, one transaction per
    batch), same line bytes. The two alternate batch by batch (runfold appends batch k, then
    SQLite inserts batch k's bytes), so both see the same disk and CPU conditions on a shared
    machine. Each side's time counts only its own storage call, on input made before its clock
    starts: runfold's `append(drafts)` (checks, canonical bytes, chain hashes, write, fsync,
    index rows) and SQLite's BEGIN/executemany/COMMIT of the finished line bytes. Returns
    (runfold lines/s, SQLite lines/s, runfold lines/s counting the building of its drafts)."""
    ws = root / f"append-{batch}"
    db = sqlite3.connect(str(root / f"append-{batch}.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE lines (seq INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    runfold_s = sqlite_s = drafts_s = 0.0
    seq = 0
    with Ledger.create(ws) as w:
        for b in range(batches):
            t0 = time.perf_counter()
            drafts = [draft(b * batch + i) for i in range(batch)]
            t1 = time.perf_counter()
            recs = w.append(drafts)
            runfold_s += time.perf_counter() - t1
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
    db.close()
    n = batch * batches
    return n / runfold_s, n / sqlite_s, n / (runfold_s + drafts_s)


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


def verdict(ratio: float, goal: float, unit: str = "") -> str:
    """The goal cell: `>= goal`, then whether this run met it."""
    return f">= {goal:g}{unit}: {'met' if ratio >= goal else 'MISSED'}"


LEGEND = """\
(a) lines/s made durable (fsync'd) by Ledger.append, next to SQLite (WAL, synchronous=FULL) inserting
    the same line bytes, one transaction per batch; ratio = runfold / SQLite (in parentheses: runfold
    also paying for building its drafts). Goal >= 1.0.
(b) `runfold verify` MB/s (parse, canonical bytes, chain, seq, kind of every line) next to BLAKE3 of
    each line of the same file read in the same chunks (the hashing floor); ratio = verify / BLAKE3.
    Goal >= 0.3.
(c) time to read one run's lines through the index next to a full scan of the ledger; ratio = scan /
    index (in parentheses: the index also paying for opening the ledger). The first open after
    another build may rebuild the disposable index; it is shown apart. Goal >= 100x.
Goals are issue 2's; wall times on a shared machine vary run to run (a ratio near 1.0 can fall either
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
    tmp = Path(tempfile.mkdtemp(prefix="runfold-bench-"))
    try:
        # (a) durable appends
        for batch, batches in (
            (1, 100 if quick else 500),
            (10, 50 if quick else 300),
            (100, 20 if quick else 100),
        ):
            ours, theirs, with_drafts = bench_appends(tmp, batch, batches)
            rows.append(
                (
                    f"(a) durable appends, batch {batch}",
                    f"{ours:,.0f} lines/s ({with_drafts:,.0f} building drafts too)",
                    f"SQLite {theirs:,.0f} lines/s",
                    f"{ours / theirs:.2f} ({with_drafts / theirs:.2f})",
                    verdict(ours / theirs, 1.0),
                )
            )
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
