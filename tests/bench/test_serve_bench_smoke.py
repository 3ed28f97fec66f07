"""Smoke tests of bench/serve.py and bench/serve_kills.py, so the benchmarks cannot rot: a small
sample of concurrent runs is valid in three dialects and replays byte-exact, group commit puts
more lines in each fsync than one run at a time does, and one kill -9 trial loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_scripts import BENCH_DIR


def test_serve_bench_on_a_small_sample(tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / "serve.py"), "--runs", "8", "--sample", "3", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "lines/fsync" in done.stdout and "group commit:" in done.stdout
    result = json.loads(out.read_text())
    checks = result["checks"]
    assert checks["not_done"] == 0 and checks["invalid_in_some_dialect"] == 0
    assert checks["replay_byte_exact"] == checks["replayed"] == 3
    together, serial = result["figures"]
    assert together["lines"] == serial["lines"]  # the same runs, line for line
    assert together["lines_per_fsync"] > serial["lines_per_fsync"]


def test_serve_kills_one_trial(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / "serve_kills.py"), "--trials", "1", "--runs", "12", "--max-runs", "6"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "invalid histories 0" in done.stdout and "steers delivered twice 0" in done.stdout
