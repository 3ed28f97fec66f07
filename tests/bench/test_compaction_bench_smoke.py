"""Smoke test of bench/compaction.py, so the benchmark cannot rot: a short run through the real
executor with compactions of both strategies, every request within its budget, replay exact."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench_scripts import load_bench


def test_a_short_compacted_run_stays_within_budget_and_replays(tmp_path: Path) -> None:
    bench = load_bench("compaction")
    r = asyncio.run(bench.measure(260, tmp_path / "ws"))
    assert r.turns == 260
    assert r.compactions.get("clear_tool_results", 0) >= 1 and r.compactions.get("summary", 0) >= 1
    assert r.over_budget == 0 and 0 < r.max_tokens <= r.budget
    assert r.replay_exact, r.replay_summary
    lines = bench.lines_of(r)
    assert any(line.startswith("replay: ") for line in lines)


def test_the_script_runs_quick(tmp_path: Path) -> None:
    bench = load_bench("compaction")
    out: list[str] = []
    r = bench.main(["--turns", "120", "--json", str(tmp_path / "r.json")], emit=out.append)
    assert r.replay_exact and (tmp_path / "r.json").exists()
    assert out[0].startswith("turns: 120")
