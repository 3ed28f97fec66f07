"""Runs spread over Ray: a batch of scripted runs over 1, 2 and 4 owner actors (one worker
process and one workspace shard each) on a local Ray cluster, runs/s for each and the scaling
ratio; then the same batch with one worker killed (SIGKILL) mid-batch: every run must end frozen
with a valid history and none may run twice (checked from the ledgers, not from Ray).

    python bench/ray_batch.py [--runs 1000] [--workers 1,2,4] [--concurrency 32] [--no-kill]

Each run is a scripted model that lists the workspace folder (one tool call) and answers: two
model turns, a handful of durable lines, no network.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import orjson

from runfold.api import Workspace
from runfold.runtime.spec import new_run_id
from runfold.server.batch import BatchRunner, TaskResult, audit, connect, read_tasks, shard_roots
from runfold.server.ray_owner import ray_module

SCRIPT = [
    {"content": [{"kind": "tool_use", "id": "call_1", "name": "list_dir", "input": '{"path":"."}'}], "usage": {"input": 100, "output": 10}},
    {"content": [{"kind": "text", "text": "The folder is listed."}], "usage": {"input": 120, "output": 8}},
]


def write_inputs(tmp: Path, runs: int) -> Path:
    script = tmp / "session.jsonl"
    script.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in SCRIPT))
    tasks = tmp / "tasks.jsonl"
    tasks.write_bytes(b"".join(orjson.dumps({"id": f"t{i}", "task": f"list the folder ({i})", "model": f"script:{script}"}) + b"\n" for i in range(runs)))
    return tasks


def one_batch(tmp: Path, tasks: Path, workers: int, concurrency: int, kill_at: int | None) -> dict[str, object]:
    root = tmp / f"ws-{workers}{'-kill' if kill_at else ''}"
    Workspace.init(root)
    runner = BatchRunner(shard_roots(root, workers), concurrency=concurrency, continue_lost=kill_at is not None)
    runner.claim()
    ray = ray_module()
    pids = ray.get([a.pid.remote() for a in runner.actors])
    killed: list[int] = []

    def on_result(_r: TaskResult, done: int) -> None:
        if kill_at is not None and done >= kill_at and not killed:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    runner.on_result = on_result
    cpu0 = ray.get([a.cpu_s.remote() for a in runner.actors])
    driver0 = time.process_time()
    report = runner.run(read_tasks(tasks))
    driver = time.process_time() - driver0
    cpu = sum(ray.get([a.cpu_s.remote() for a in runner.actors])) - sum(cpu0)
    after = ray.get([a.pid.remote() for a in runner.actors])
    runner.stop()
    summary = report.summary()
    check = audit(report)
    per_run = {"owners_ms": round(1000 * cpu / max(1, summary["runs"]), 2), "driver_ms": round(1000 * driver / max(1, summary["runs"]), 2)}
    return {**summary, "audit": check, "killed": killed, "restarted_as": after[0] if killed else None, "cpu_per_run": per_run}


def in_process(tmp: Path, tasks: Path, concurrency: int) -> tuple[int, float, float]:
    """The alternative without Ray: the same runs through one `RunOwner` in this process.
    Returns (runs, seconds, CPU seconds)."""
    from runfold.server.owner import HostedWorkspace, RunOwner

    root = tmp / "ws-in-process"
    Workspace.init(root)
    todo = read_tasks(tasks)

    async def main() -> tuple[float, float]:
        owner = RunOwner(HostedWorkspace(root), max_runs=concurrency)
        await owner.start()
        sem = asyncio.Semaphore(concurrency)

        async def one(request: dict[str, object]) -> None:
            async with sem:
                h = await owner.dispatch(dict(request), run_id=new_run_id())
                if h.task is not None:
                    await h.task

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(t.request) for t in todo))
        out = time.perf_counter() - t0, time.process_time() - c0
        await owner.stop()
        return out

    seconds, cpu = asyncio.run(main())
    return len(todo), seconds, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--no-kill", action="store_true")
    args = ap.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    t0 = time.monotonic()
    connect("local", workers=max(counts))
    print(f"local Ray cluster with {max(counts)} CPUs up in {time.monotonic() - t0:.1f} s (this machine: {os.cpu_count()} cores)")
    ok = True
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tasks = write_inputs(tmp, args.runs)
        n, secs, cpu = in_process(tmp, tasks, args.concurrency)
        print(f"no Ray, one owner in this process: {n} runs in {secs:.3f} s = {n / secs:.2f} runs/s · {1000 * cpu / n:.2f} ms CPU per run")
        rates: dict[int, float] = {}
        for w in counts:
            r = one_batch(tmp, tasks, w, args.concurrency, None)
            rates[w] = float(r["runs_per_s"] or 0)  # type: ignore[arg-type]
            a = r["audit"]
            assert isinstance(a, dict)
            good = not a["started_twice"] and not a["not_frozen"] and not a["missing"]
            ok = ok and good
            print(
                f"workers {w}: {r['runs']} runs in {r['seconds']} s = {r['runs_per_s']} runs/s · outcomes {r['outcomes']} · "
                f"CPU per run: owners {r['cpu_per_run']['owners_ms']} ms, driver {r['cpu_per_run']['driver_ms']} ms · "  # type: ignore[index]
                f"ledger check {'ok' if good else 'FAILED'} ({a['verified_lines']} lines verified)"
            )
        base = rates[counts[0]]
        print("scaling: " + ", ".join(f"{w} workers {rates[w] / base:.2f}x" for w in counts) + f" (vs {counts[0]} worker)")
        if not args.no_kill:
            w = 2 if 2 in counts else max(counts)
            r = one_batch(tmp, tasks, w, args.concurrency, kill_at=args.runs // 3)
            a = r["audit"]
            assert isinstance(a, dict)
            good = a["runs"] == a["frozen"] and not a["started_twice"] and not a["not_frozen"] and not a["missing"]
            ok = ok and good
            print(
                f"kill -9 of worker pid {r['killed']} after {args.runs // 3} results (restarted as pid {r['restarted_as']}), "
                f"{w} workers, --continue-lost: {r['tasks']} tasks, {r['runs']} runs, lost {r['lost']} "
                f"(frozen process_died, continued {r['continued']}), failed calls retried {r['failed_calls']}, "
                f"final outcomes {r['outcomes']} · every run frozen: {a['frozen']}/{a['runs']} · "
                f"started twice: {len(a['started_twice'])} · valid history: {a['verified_lines']} lines verified · "
                f"{'ok' if good else 'FAILED'}"
            )
    ray_module().shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
