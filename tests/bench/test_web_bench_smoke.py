"""Smoke test of bench/web.py, so the benchmark cannot rot: `--quick` builds its workspace,
measures the CLI and the pages in fresh processes and prints every figure and the ratios."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_web_bench_runs_quick(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "web.py"), "--quick", "--dir", str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.startswith("workspace: 20,001 lines, 16 runs")
    for what in ("CLI `runfold runs`", "page: overview, first request", "timeline first page, fresh server"):
        assert what in out
    assert "ratios: overview first / CLI runs = " in out
