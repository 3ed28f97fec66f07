"""Smoke test of bench/ledger.py (issue 2), so the benchmark cannot rot: part (a) at a tiny size
must leave a ledger that verifies, and a SQLite table and a bare file (the floor) holding exactly
the same line bytes (the comparison is like for like), and report positive rates."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench_scripts import load_bench

from runfold.store.ledger import Ledger
from runfold.store.verify import verify_path


def test_appends_part_compares_the_same_bytes(tmp_path: Path) -> None:
    bench = load_bench("ledger")
    a = bench.bench_appends(tmp_path, 10, 3)
    assert a.runfold > 0 and a.sqlite > 0 and a.bare > 0 and 0 < a.runfold_with_drafts < a.runfold
    assert a.staging_us > 0
    report = verify_path(tmp_path / "append-10")
    assert report.lines == 31  # workspace_initialized + 3 batches of 10
    with Ledger.open(tmp_path / "append-10", writer=False) as reader:
        ledger_lines = [r.raw for r in reader.records(since=1)]
    db = sqlite3.connect(tmp_path / "append-10.sqlite")
    sqlite_lines = [bytes(row[0]) for row in db.execute("SELECT line FROM lines ORDER BY seq")]
    db.close()
    assert sqlite_lines == ledger_lines
    # the floor appended the very same bytes, newline-terminated, to its plain file
    assert (tmp_path / "append-10.bare").read_bytes() == b"".join(line + b"\n" for line in ledger_lines)


def test_cached_ledger_is_reused_only_when_its_key_matches(tmp_path: Path) -> None:
    bench = load_bench("ledger")
    big = tmp_path / "big"
    assert "built 50 lines" in bench.cached_ledger(big, 50, 5)
    assert "reused" in bench.cached_ledger(big, 50, 5)
    assert verify_path(big).lines == 50
    # a marker left by another size (or an older build's bare "ok") is rebuilt, never measured
    (big / "built").write_text("ok")
    assert "built 50 lines" in bench.cached_ledger(big, 50, 5)
    assert "built 60 lines" in bench.cached_ledger(big, 60, 5)
    assert verify_path(big).lines == 60
    assert (big / "built").read_text() == bench.cache_key(60, 5)


def test_verdict_names_met_and_missed_goals() -> None:
    bench = load_bench("ledger")
    assert bench.verdict(1.0, 1.0) == ">= 1: met"
    assert bench.verdict(0.99, 1.0) == ">= 1: MISSED"
    assert bench.verdict(615, 100, "x") == ">= 100x: met"
