"""Smoke test of bench/importing.py, so the benchmark cannot rot: its synthetic Claude Code
session imports with the counts it was built with (one reply per tool turn plus the last, one
call and one result per turn), the ledger verifies, and the timings are positive."""

from __future__ import annotations

from pathlib import Path

from bench_scripts import load_bench

from runfold.api import Workspace


def test_the_synthetic_session_imports_with_its_counts(tmp_path: Path) -> None:
    bench = load_bench("importing")
    src = tmp_path / "s.jsonl"
    src.write_text(bench.claude_code_session(7))
    timing = bench.time_import(src, tmp_path / "ws", "claude-code")
    assert (timing.replies, timing.calls, timing.results) == (8, 7, 7)
    assert timing.lines == 1 + 2 * 7 + 1
    assert timing.import_s > 0 and timing.json_s > 0 and timing.us_per_line > 0
    assert Workspace.open(tmp_path / "ws").verify().lines > timing.lines
