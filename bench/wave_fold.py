"""Folding a run with one wide wave: `runfold conversation` time and peak RSS at waves of 100,
1,000 and 10,000 tool calls, and the ratios between them (folding is linear in wave size,
DESIGN.md §6–§7).

Usage: python bench/wave_fold.py [--sizes 100,1000,10000] [--json PATH]. Each size is one
workspace holding one run: a scripted reply asking for N calls of a small read-only tool, their
N results, and a final answer, written by the real run loop. Then `runfold conversation RUN
--json` runs in a fresh process, timed wall-clock, its peak RSS read from the kernel
(`wait4`); and `runfold continue RUN` the same way (it folds the lineage to plan the successor).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runfold.api import Workspace
from runfold.providers.scripted import ScriptedProvider


def echo(n: int) -> dict[str, int]:
    """Return n.

    Args:
        n: A number.
    """
    return {"n": n}


def build(root: Path, calls: int) -> str:
    """A workspace at `root` with one run whose only wave has `calls` calls; returns the run."""
    ws = Workspace.init(root)
    wave = {
        "content": [
            {"kind": "tool_use", "id": f"c{i}", "name": "echo", "input": json.dumps({"n": i})} for i in range(calls)
        ]
    }
    done = {"content": [{"kind": "text", "text": "done"}]}
    out = ws.run("call echo many times", model=ScriptedProvider.of([wave, done]), tools=[echo])
    ws.close()
    if out.completion != "done":
        raise RuntimeError(out.reason)
    return out.run_id


def fold_work(root: Path, run: str) -> tuple[float, int]:
    """(CPU seconds, Python function calls) of what `runfold conversation RUN` and planning a
    successor of RUN do, in this process: the run fold, the request in every dialect with the
    validator's verdicts, and the fork plan at the run's tail. Calls are counted with a profile
    hook (the CPU time is then taken from a second, unhooked pass)."""
    from runfold.core.fold import plan_fork
    from runfold.runtime.spec import new_run_id

    ws = Workspace.open(root)
    try:

        def work() -> None:
            ws.request_at(run)
            lines = ws.lineage_lines(run)
            plan_fork(lines, run, lines[run][-1].seq, new_run=new_run_id(), tail=lines[run][-1].seq)

        calls = 0

        def count(_frame: Any, event: str, _arg: Any) -> None:
            nonlocal calls
            if event == "call":
                calls += 1

        sys.setprofile(count)
        try:
            work()
        finally:
            sys.setprofile(None)
        start = time.process_time()
        work()
        return time.process_time() - start, calls
    finally:
        ws.close()


def timed(argv: list[str], cwd: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS in bytes) of `python -m runfold ARGV` in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", *argv], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0,):
        raise RuntimeError(f"runfold {' '.join(argv)} exited {status}")
    return took, usage.ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


def measure(calls: int, base: Path) -> dict[str, Any]:
    root = base / f"w{calls}"
    t0 = time.perf_counter()
    run = build(root, calls)
    built = time.perf_counter() - t0
    conv_s, conv_rss = timed(["conversation", run, "--json"], root)
    script = base / "cont.jsonl"
    script.write_text(json.dumps({"content": [{"kind": "text", "text": "ok"}]}) + "\n")
    cont_s, cont_rss = timed(["continue", run, "--model", f"script:{script}", "--json"], root)
    return {
        "calls": calls,
        "run_s": round(built, 3),
        "conversation_s": round(conv_s, 3),
        "conversation_rss_mb": round(conv_rss / 1e6, 1),
        "continue_s": round(cont_s, 3),
        "continue_rss_mb": round(cont_rss / 1e6, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            rows.append(measure(n, Path(tmp)))
            r = rows[-1]
            print(
                f"{n:>6} calls: run {r['run_s']:7.2f} s | conversation {r['conversation_s']:6.2f} s, "
                f"{r['conversation_rss_mb']:7.1f} MB | continue {r['continue_s']:6.2f} s, {r['continue_rss_mb']:7.1f} MB",
                flush=True,
            )
    for a, b in itertools.pairwise(rows):
        k = b["calls"] / a["calls"]
        print(
            f"x{k:g} calls ({a['calls']} -> {b['calls']}): conversation time x{b['conversation_s'] / a['conversation_s']:.1f}, "
            f"run time x{b['run_s'] / a['run_s']:.1f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
