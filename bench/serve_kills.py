"""kill -9 of `runfold serve` during 100 concurrent runs, many trials: after each kill the server
starts again and must leave a valid history, every acknowledged line still there byte for byte,
every acknowledged dispatch run exactly once, every acknowledged steer recorded at most once.

Usage: python bench/serve_kills.py [--trials 50] [--runs 100] [--max-runs 50]. Each trial:
a fresh workspace; dispatch `--runs` scripted runs (10 turns, a few ms per reply) into a server
holding at most `--max-runs` at once (the rest queued); steer some, follow some event streams;
SIGKILL the server at a random moment once 60% of the dispatches were acknowledged; start it
again, let it finish the queue, stop it; check.
Prints per-trial and total counts; exits 1 when any count that must be 0 is not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from runfold.api import Workspace

TURNS = 10


def write_script(path: Path, delay_ms: int) -> Path:
    entries: list[dict[str, Any]] = [
        {
            "content": [
                {"kind": "text", "text": f"step {i}"},
                {"kind": "tool_use", "id": f"t{i}", "name": "list_dir", "input": {"path": f"d{i}"}},
            ],
            "delay_ms": delay_ms,
        }
        for i in range(TURNS - 1)
    ]
    entries.append({"content": [{"kind": "text", "text": "all done"}]})
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def start(root: Path, max_runs: int) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "serve", "-w", str(root), "--port", "0", "--max-runs", str(max_runs)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    info = root / ".runfold" / "serve" / "serve.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            obj = json.loads(info.read_text())
            if obj["pid"] == proc.pid:
                return proc, obj["url"] + "/api"
        except (OSError, ValueError, KeyError):
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    raise RuntimeError("the server did not start")


@dataclass
class Acked:
    runs: list[str] = field(default_factory=list)
    steers: dict[str, str] = field(default_factory=dict)  # signal -> run
    lines: list[dict[str, Any]] = field(default_factory=list)


async def load(url: str, script: Path, n: int, acked: Acked, rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=32)) as client:

        async def dispatch(i: int) -> None:
            resp = await client.post("/runs", json={"task": f"job {i}", "model": f"script:{script}"})
            if resp.status_code == 202:
                run = resp.json()["run"]
                acked.runs.append(run)
                if i % 10 == 0:
                    await steer(run)
                if i % 25 == 0:
                    await follow(run)

        async def steer(run: str) -> None:
            resp = await client.post(f"/runs/{run}/steer", json={"text": f"note for {run[:8]}"})
            if resp.status_code == 202 and resp.json().get("signal"):
                acked.steers[resp.json()["signal"]] = run

        async def follow(run: str) -> None:
            async with client.stream("GET", f"/runs/{run}/events") as resp:
                async for line in resp.aiter_lines():
                    if line.startswith('data: {"v"'):
                        acked.lines.append(json.loads(line[6:]))

        await asyncio.gather(*(dispatch(i) for i in range(n)), return_exceptions=True)


async def trial_load(url: str, script: Path, n: int, kill_after_s: float, proc: subprocess.Popen[str], rng: random.Random) -> Acked:
    acked = Acked()
    task = asyncio.ensure_future(load(url, script, n, acked, rng))
    deadline = time.monotonic() + 120
    while len(acked.runs) < n * 0.6 and not task.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # most dispatches acknowledged, the queue filled: now kill
    await asyncio.sleep(kill_after_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    try:
        await asyncio.wait_for(task, 30)
    except (TimeoutError, Exception):
        task.cancel()
    return acked


@dataclass
class Verdict:
    invalid_histories: int = 0
    lost_lines: int = 0
    lost_dispatches: int = 0
    ran_twice: int = 0
    steers_twice: int = 0
    steers_unrecorded: int = 0
    runs_acked: int = 0
    lines_acked: int = 0
    steers_acked: int = 0
    died: int = 0


def check(root: Path, acked: Acked) -> Verdict:
    v = Verdict(runs_acked=len(acked.runs), lines_acked=len(acked.lines), steers_acked=len(acked.steers))
    with Workspace.open(root) as ws:
        try:
            ws.verify()
        except Exception:
            v.invalid_histories = 1
            return v
        lines = ws.records()
        summaries = {s.run: s for s in ws.run_summaries()}
    if any(s.status == "running" for s in summaries.values()):
        v.invalid_histories = 1
    started = Counter(r.env.run for r in lines if r.env.kind == "run_started")
    v.lost_dispatches = sum(1 for r in acked.runs if started[r] == 0)
    v.ran_twice = sum(1 for r in acked.runs if started[r] > 1)
    v.died = sum(1 for s in summaries.values() if s.cause == "process_died")
    by_seq = {r.seq: r.raw for r in lines}
    v.lost_lines = sum(
        1
        for line in acked.lines
        if line["seq"] not in by_seq or json.loads(by_seq[line["seq"]]) != line
    )
    signals = Counter(r.env.data.get("signal") for r in lines if r.env.kind == "steer_received")
    v.steers_twice = sum(1 for s in acked.steers if signals[s] > 1)
    v.steers_unrecorded = sum(1 for s in acked.steers if signals[s] == 0)
    return v


def run_trial(i: int, args: argparse.Namespace, base: Path) -> Verdict:
    rng = random.Random(1000 + i)
    root = base / f"t{i}"
    Workspace.init(root)
    for k in range(TURNS - 1):
        (root / f"d{k}").mkdir()
    script = write_script(base / f"s{i}.jsonl", delay_ms=args.delay_ms)
    proc, url = start(root, args.max_runs)
    acked = asyncio.run(trial_load(url, script, args.runs, rng.uniform(0.0, args.kill_within_s), proc, rng))
    proc2, url2 = start(root, args.max_runs)
    try:
        deadline = time.monotonic() + 600
        with httpx.Client(base_url=url2, timeout=60) as client:
            while time.monotonic() < deadline:
                info = client.get("/server").json()
                if info["running"] == 0 and info["queued"] == 0:
                    break
                time.sleep(0.1)
    finally:
        proc2.send_signal(signal.SIGTERM)
        proc2.wait(timeout=120)
    return check(root, acked)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--max-runs", type=int, default=50)
    ap.add_argument("--delay-ms", type=int, default=20, help="each scripted reply's delay")
    ap.add_argument(
        "--kill-within-s", type=float, default=1.5, help="the kill comes 0..this s after 60%% of the dispatches were acked"
    )
    args = ap.parse_args()
    total = Verdict()
    with tempfile.TemporaryDirectory(prefix="runfold-serve-kills-") as tmp:
        for i in range(args.trials):
            v = run_trial(i, args, Path(tmp))
            for k in total.__dataclass_fields__:
                setattr(total, k, getattr(total, k) + getattr(v, k))
            print(
                f"trial {i + 1:>3}: {v.runs_acked} dispatches acked, {v.died} runs frozen process_died, "
                f"{v.lines_acked} lines acked, {v.steers_acked} steers acked · invalid {v.invalid_histories} · "
                f"lost lines {v.lost_lines} · lost dispatches {v.lost_dispatches} · ran twice {v.ran_twice} · "
                f"steers twice {v.steers_twice} · steers unrecorded {v.steers_unrecorded}",
                flush=True,
            )
    print(
        f"\n{args.trials} trials of kill -9 during {args.runs} concurrent runs (at most {args.max_runs} at once): "
        f"invalid histories {total.invalid_histories} · acknowledged lines lost {total.lost_lines} "
        f"(of {total.lines_acked}) · acknowledged dispatches lost {total.lost_dispatches} (of {total.runs_acked}) · "
        f"dispatches run twice {total.ran_twice} · steers delivered twice {total.steers_twice} "
        f"(of {total.steers_acked}; {total.steers_unrecorded} acknowledged steers not recorded) · "
        f"runs frozen process_died {total.died}"
    )
    bad = total.invalid_histories + total.lost_lines + total.lost_dispatches + total.ran_twice + total.steers_twice
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
