"""Smoke test of bench/ledger.py (issue 2), so the benchmark cannot rot: part (a) at a tiny size
must leave a ledger that verifies and a SQLite table holding exactly the same line bytes (the
comparison is like for like), and report positive rates."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

from runfold.store.ledger import Ledger
from runfold.store.verify import verify_path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "ledger.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ledger_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("ledger_bench", mod)
    spec.loader.exec_module(mod)
    return mod


def test_appends_part_compares_the_same_bytes(tmp_path: Path) -> None:
    bench = load_bench()
    ours, sqlite_rate, with_drafts = bench.bench_appends(tmp_path, 10, 3)
    assert ours > 0 and sqlite_rate > 0 and 0 < with_drafts < ours
    report = verify_path(tmp_path / "append-10")
    assert report.lines == 31  # workspace_initialized + 3 batches of 10
    with Ledger.open(tmp_path / "append-10", writer=False) as reader:
        ledger_lines = [r.raw for r in reader.records(since=1)]
    db = sqlite3.connect(tmp_path / "append-10.sqlite")
    sqlite_lines = [bytes(row[0]) for row in db.execute("SELECT line FROM lines ORDER BY seq")]
    db.close()
    assert sqlite_lines == ledger_lines


def test_cached_ledger_is_reused_only_when_its_key_matches(tmp_path: Path) -> None:
    bench = load_bench()
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
    bench = load_bench()
    assert bench.verdict(1.0, 1.0) == ">= 1: met"
    assert bench.verdict(0.99, 1.0) == ">= 1: MISSED"
    assert bench.verdict(615, 100, "x") == ">= 100x: met"
