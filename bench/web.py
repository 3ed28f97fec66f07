"""Benchmark of the web page on a large workspace: server time and peak RSS of the overview and
of a 100,000-line run's timeline first page, next to the CLI's `runfold runs` on the same
workspace.

Usage: python bench/web.py [--quick | --lines N] [--dir DIR]. The full size is a 1,000,000-line workspace
(one run of 100,000 lines and 900 runs of 1,000), built by writing lines through the ledger API
and cached under /tmp/runfold-bench-web-1m (rebuilt when its shape differs; delete it to
rebuild); --quick is 20,000 lines (one run of 5,000). Every figure is measured in a fresh
process: the CLI as `runfold runs`, each page through the app in-process (FastAPI's test
client: the server's own time, no network), peak RSS from the kernel (`ru_maxrss`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runfold.core.canonical import FORMAT_VERSION
from runfold.core.records import Draft
from runfold.store.ledger import Ledger

RUN_FMT = "0190f6a2-7c4a-7bbb-9d1e-{:012x}"
BATCH = 2_000


def _run_lines(run: str, n: int, i0: int) -> list[Draft]:
    """A run of `n` lines: run_started, then tool results and replies with usage, run_frozen."""
    out = [Draft(run, "person", "run_started", {"task": f"task {i0}: tidy the notes", "goal": "", "skills": []})]
    for i in range(n - 2):
        k = i0 + i
        if i % 4 == 3:
            out.append(
                Draft(
                    run,
                    "agent",
                    "model_returned",
                    {
                        "message": {"content": [{"kind": "text", "text": f"step {k}: reading the next file"}]},
                        "calls": 1,
                        "usage": {"input": 1000 + i, "output": 20, "cache_read": 0, "cache_write": 0},
                        "billed_usd_micros": 31,
                    },
                )
            )
        else:
            out.append(
                Draft(
                    run,
                    "agent",
                    "tool_result",
                    {
                        "tool_use_id": f"toolu_{k:08d}",
                        "name": "read_file",
                        "result": {"text": f"line {k}: the quick brown fox jumps over the lazy dog"},
                        "took_us": 1200 + k % 97,
                    },
                )
            )
    out.append(Draft(run, "runtime", "run_frozen", {"completion": "limit"}))
    return out


def build(root: Path, big: int, small_runs: int, small: int) -> str:
    """Build (or reuse) the workspace at `root`; returns the big run's id."""
    stamp = root / "bench-shape.json"
    shape = {"v": FORMAT_VERSION, "big": big, "small_runs": small_runs, "small": small}
    big_run = RUN_FMT.format(0)
    if stamp.exists() and json.loads(stamp.read_text()) == shape:
        return big_run
    if root.exists():
        import shutil

        shutil.rmtree(root)
    started = time.perf_counter()
    pending: list[Draft] = []
    with Ledger.create(root) as w:

        def flush(force: bool = False) -> None:
            while len(pending) >= BATCH or (force and pending):
                w.append(pending[:BATCH])
                del pending[:BATCH]

        pending.extend(_run_lines(big_run, big, 0))
        flush()
        for r in range(1, small_runs + 1):
            pending.extend(_run_lines(RUN_FMT.format(r), small, big + r * small))
            flush()
        flush(force=True)
        lines = w.next_seq
    stamp.write_text(json.dumps(shape))
    print(f"built {lines:,} lines in {time.perf_counter() - started:.1f} s at {root}", file=sys.stderr)
    return big_run


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_pages(root: Path, big_run: str, warm: bool) -> dict[str, Any]:
    """In this (fresh) process: the overview, then the big run's first page (cold, or after the
    overview warmed the fold when `warm`)."""
    from fastapi.testclient import TestClient

    from runfold.web import create_app

    client = TestClient(create_app(root))
    client.get("/static/app.css")
    base_rss = _rss_mb()
    out: dict[str, Any] = {"base_rss_mb": base_rss}
    if warm:
        t = time.perf_counter()
        got = client.get("/")
        out["overview_s"] = time.perf_counter() - t
        assert got.status_code == 200, got.text[:500]
        out["overview_rss_mb"] = _rss_mb()
        out["first_overview_indexed"] = "being folded" in got.text
        while "being folded" in got.text:  # the fold reads the ledger in the background
            time.sleep(0.5)
            got = client.get("/")
        out["folded_s"] = time.perf_counter() - t
        out["folded_rss_mb"] = _rss_mb()
        t = time.perf_counter()
        client.get("/")
        out["overview_again_s"] = time.perf_counter() - t
    t = time.perf_counter()
    got = client.get(f"/runs/{big_run}")
    out["run_page_s"] = time.perf_counter() - t
    assert got.status_code == 200 and 'data-seq="' in got.text, got.text[:500]
    out["run_page_rss_mb"] = _rss_mb()
    t = time.perf_counter()
    got = client.get(f"/runs/{big_run}?q=brown+fox+jumps&kind=tool_result")
    out["search_page_s"] = time.perf_counter() - t
    assert got.status_code == 200
    out["peak_rss_mb"] = _rss_mb()
    return out


def measure_cli(root: Path) -> dict[str, Any]:
    """`runfold runs -w ROOT` in a child process: wall time and its own peak RSS."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "runs", "-w", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    if status != 0:
        raise RuntimeError(f"runfold runs failed: {proc.stderr.read() if proc.stderr else ''}")
    return {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024}


def _child(what: str, root: Path, big_run: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", what, "--dir", str(root), "--run", big_run],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 lines instead of 1,000,000")
    ap.add_argument(
        "--lines", type=int, default=None, help="about N lines: a run of N/10, the rest in runs of 1,000 (cached per size)"
    )
    ap.add_argument("--dir", type=Path, default=None, help="where the workspace is built (cached)")
    ap.add_argument("--measure", choices=("warm", "cold"), help=argparse.SUPPRESS)
    ap.add_argument("--run", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure_pages(args.dir, args.run, warm=args.measure == "warm")))
        return
    big, small_runs, small = (5_000, 15, 1_000) if args.quick else (100_000, 900, 1_000)
    name = "quick" if args.quick else "1m"
    if args.lines is not None:
        big, small_runs, small = args.lines // 10, (args.lines - args.lines // 10) // 1_000, 1_000
        name = str(args.lines)
    root = args.dir or Path(f"/tmp/runfold-bench-web-{name}")
    big_run = build(root, big, small_runs, small)
    lines = 1 + big + small_runs * small
    cli = measure_cli(root)
    warm = _child("warm", root, big_run)
    cold = _child("cold", root, big_run)
    print(f"workspace: {lines:,} lines, {small_runs + 1} runs; the big run has {big:,} lines ({root})")
    print(f"{'what':<56} {'time':>9} {'peak RSS':>10}")
    rows = [
        ("CLI `runfold runs` (process, incl. start-up)", cli["seconds"], cli["peak_rss_mb"]),
        (
            "page: overview, first request "
            + ("(from the index)" if warm["first_overview_indexed"] else "(folds every line)"),
            warm["overview_s"],
            warm["overview_rss_mb"],
        ),
        ("page: overview, until fully folded (from the first)", warm["folded_s"], warm["folded_rss_mb"]),
        ("page: overview, again (the fold is kept)", warm["overview_again_s"], warm["folded_rss_mb"]),
        ("page: big run, timeline first page, after overview", warm["run_page_s"], warm["run_page_rss_mb"]),
        ("page: big run, timeline first page, fresh server", cold["run_page_s"], cold["run_page_rss_mb"]),
        ("page: big run, search + kind filter (one page)", cold["search_page_s"], cold["peak_rss_mb"]),
    ]
    for name, seconds, rss in rows:
        print(f"{name:<56} {seconds:>8.3f}s {rss:>8.1f} MB")
    print(f"(server process RSS before any page: {cold['base_rss_mb']:.1f} MB)")
    print(
        f"ratios: overview first / CLI runs = {warm['overview_s'] / cli['seconds']:.2f}; "
        f"run first page (fresh) / CLI runs = {cold['run_page_s'] / cli['seconds']:.3f}; "
        f"overview fully folded / CLI runs = {warm['folded_s'] / cli['seconds']:.2f}"
    )


if __name__ == "__main__":
    main()
