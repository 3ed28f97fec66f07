"""Smoke test of bench/turn_overhead.py, the runfold half only, so the benchmark cannot
rot: a few scripted turns through the real executor, the figures it reports checked against the
ledger itself, and the script run end to end as a subprocess. Needs no LangGraph."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from bench_scripts import BENCH_DIR, load_bench

from runfold.api import Workspace


def test_runfold_half_measures_a_real_run(tmp_path: Path) -> None:
    bench = load_bench("turn_overhead")
    m = asyncio.run(bench.measure_runfold(6, tmp_path))
    assert (m.system, m.turns) == ("runfold", 6)
    ws = Workspace.open(Path(m.notes["workspace"]))
    lines = ws.records(run=m.notes["run"])
    # the bytes it reports are the run's own ledger lines, newlines included
    assert m.written_bytes == sum(len(r.raw) + 1 for r in lines)
    assert m.bytes_per_turn == m.written_bytes / 6
    assert 0 < m.bytes_per_turn_last < m.bytes_per_turn
    assert m.stored_bytes > m.written_bytes  # the whole .runfold: ledger, CAS, index, config
    kinds = [r.kind_name for r in lines]
    assert kinds.count("tool_result") == 6 and kinds.count("model_called") == 7
    assert kinds[-2:] == ["handoff_written", "run_frozen"]
    results = [r.env.data for r in lines if r.kind_name == "tool_result"]
    assert [r["result"] for r in results] == [{"value": f"turn {i}"} for i in range(6)]
    assert ws.verify().lines == ws.records()[-1].seq + 1
    replay = ws.replay(m.notes["run"])
    assert replay.ok and replay.requests == 7
    ws.close()


def test_runfold_bytes_per_turn_do_not_grow_with_history(tmp_path: Path) -> None:
    bench = load_bench("turn_overhead")
    small = asyncio.run(bench.measure_runfold(5, tmp_path))
    large = asyncio.run(bench.measure_runfold(60, tmp_path))
    # only digit widths (seq, turn numbers, request sizes) may differ between the two
    assert abs(large.bytes_per_turn_last - small.bytes_per_turn_last) <= 0.03 * small.bytes_per_turn_last
    assert any("no growth with history: met" in line for line in bench.verdicts([small, large]))


HAS_LANGGRAPH = importlib.util.find_spec("langgraph") is not None


def test_script_runs_end_to_end(tmp_path: Path) -> None:
    """The script as a user runs it; without LangGraph installed (the project venv), it says so
    and measures runfold only, with no `--skip-langgraph` needed."""
    out = tmp_path / "results.json"
    skip = ["--skip-langgraph"] if HAS_LANGGRAPH else []
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / "turn_overhead.py"), "--sizes", "3,4", "--json", str(out), *skip],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert ("LangGraph is not importable here" in proc.stdout) is not HAS_LANGGRAPH
    assert "B/turn last10%" in proc.stdout
    assert "no growth with history" in proc.stdout
    data = json.loads(out.read_text())
    assert [(r["system"], r["turns"]) for r in data] == [("runfold", 3), ("runfold", 4)]
    assert all(r["written_bytes"] > 0 and r["cpu_s"] > 0 for r in data)
