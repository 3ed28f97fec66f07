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
