"""Smoke test of bench/peers.py, so the benchmark cannot rot: the script run end to end with
`--quick` on runfold alone (the project venv has none of the peers, so the script must name
each missing peer and measure runfold by itself), its figures checked for sense, and the
pieces it reports with checked against the ledger of a real killed run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_scripts import BENCH_DIR, load_bench

from runfold.api import Workspace


def test_quick_run_measures_runfold_and_names_missing_peers(tmp_path: Path) -> None:
    peers = load_bench("peers")
    missing = [s for s, mods in peers.SYSTEMS.items() if s != "runfold" and peers.missing_modules(mods)]
    out = tmp_path / "out"
    systems = ["runfold", *missing]  # a peer installed here is not run: the test stays quick
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH_DIR / "peers.py"),
            "--quick",
            "--out",
            str(out),
            "--systems",
            ",".join(systems),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    for s in missing:
        assert f"{s} is not installed here" in proc.stdout
    assert "measuring runfold at N = 10, 100" in proc.stdout
    assert "| runfold | 100 |" in proc.stdout
    assert "runfold bytes per turn (last 10%) by N" in proc.stdout
    assert "fdatasync floor" in proc.stdout
    data = json.loads((out / "results.json").read_text())
    assert [(r["system"], r["turns"]) for r in data] == [("runfold", 10), ("runfold", 100)]
    for r in data:
        assert 0 < r["cpu_s"] and 0 < r["wall_s"] and r["rss_kb"] > 1000
        assert r["stored_bytes"] > r["payload_bytes"] > r["bytes_turn_last"] * r["turns"] / 2 > 0
        assert 0 < r["resume_open_s"] < r["resume_s"] and r["fork_s"] > 0
        assert r["floor"]["median_s"] > 0
    assert (out / "table.md").read_text().startswith("| system | N |")


def test_killed_run_leaves_a_ledger_that_resumes_and_forks(tmp_path: Path) -> None:
    """The run child dies by SIGKILL at its last turn with every turn durable; a new process
    resumes it (the dead run frozen, a successor) and forks it at the middle turn."""
    peers = load_bench("peers")
    d = tmp_path / "runfold-6"
    d.mkdir()
    run = peers._spawn(["run", "runfold", "6", str(d), ""], timeout=300)
    assert run.returncode == -9, run.stderr
    result = json.loads((d / "run.json").read_text())
    ws = Workspace.open(d / "ws")
    lines = ws.records(run=result["notes"]["run"])
    assert result["payload_bytes"] == sum(len(r.raw) + 1 for r in lines)
    assert [r.kind_name for r in lines].count("tool_result") == 12  # six waves of two
    assert lines[-1].kind_name == "model_called"  # killed waiting for the last reply
    ws.close()
    res = peers._spawn(["resume", "runfold", "6", str(d), "", "0"], timeout=300)
    assert res.returncode == 0, res.stderr
    ws = Workspace.open(d / "ws")
    assert len(ws.runs()) == 3  # the killed run, its successor, the fork
    assert ws.verify().lines == ws.records()[-1].seq + 1
    ws.close()


def test_growth_estimate_extrapolates_from_the_two_largest_sizes() -> None:
    peers = load_bench("peers")
    rows = [
        {"system": "runfold", "turns": 100, "wall_s": 1.0},
        {"system": "runfold", "turns": 1000, "wall_s": 100.0},
    ]
    assert peers._estimate_s(rows, "runfold", 10000) == pytest.approx(10000.0)
    assert peers._estimate_s(rows[:1], "runfold", 10000) is None
