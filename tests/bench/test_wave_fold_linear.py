"""Folding is linear in wave size (bench/wave_fold.py): the work of `runfold conversation` and
of planning a successor, for a run with one wave of N calls and one of 8·N calls, grows about
8-fold — counted in Python function calls (deterministic) and in CPU time (with generous slack);
a fold quadratic in the wave would grow 64-fold. No absolute timings."""

from __future__ import annotations

from pathlib import Path

from bench_scripts import load_bench

SMALL, FACTOR = 250, 8


def test_conversation_and_fork_planning_are_linear_in_wave_size(tmp_path: Path) -> None:
    bench = load_bench("wave_fold")
    small = bench.build(tmp_path / "small", SMALL)
    large = bench.build(tmp_path / "large", SMALL * FACTOR)
    bench.fold_work(tmp_path / "small", small)  # warm imports and caches
    t_small, calls_small = min(bench.fold_work(tmp_path / "small", small) for _ in range(2))
    t_large, calls_large = min(bench.fold_work(tmp_path / "large", large) for _ in range(2))
    assert calls_large <= calls_small * FACTOR * 1.5, (calls_small, calls_large)
    assert t_large <= max(t_small, 0.01) * FACTOR * 3, (t_small, t_large)  # quadratic: x64
