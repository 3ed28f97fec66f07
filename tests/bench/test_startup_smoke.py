"""Smoke test of bench/startup.py, so the benchmark cannot rot: two runs of each command
succeed, the table has one row per command with its ratio and verdict, and --json writes the
same timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_scripts import BENCH_DIR, load_bench


def test_measure_times_every_command_and_the_table_shows_them(tmp_path: Path) -> None:
    bench = load_bench("startup")
    timings = bench.measure(bench.SMALL_LEDGER, 2)
    assert [t.name for t in timings] == ["python -c pass", "runfold --help", "runfold verify", "runfold log"]
    assert all(len(t.seconds) == len(t.cpu_seconds) == 2 and min(t.seconds) > 0 for t in timings)
    rows = bench.table(timings)
    assert rows[0].startswith("command") and len(rows) >= 2 + len(timings)
    assert any(r.startswith("runfold --help") and ("met" in r or "MISSED" in r) for r in rows)
    assert next(r for r in rows if r.startswith("python -c pass")).split()[7] == "1.0"  # the floor


def test_script_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / "startup.py"), "--runs", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "runfold verify" in done.stdout and "× python" in done.stdout
    assert {t["name"] for t in json.loads(out.read_text())} == {
        "python -c pass",
        "runfold --help",
        "runfold verify",
        "runfold log",
    }
