"""Benchmark of `runfold serve`: N concurrent scripted runs (a zero-latency model, 10 turns each)
in one server, next to the same N runs one at a time in one server (the group-commit ratio).

Usage: python bench/serve.py [--runs 1000] [--sample 20] [--json FILE]. Prints runs/s, lines/s,
fsync batches, lines per batch and the server's peak RSS for both ways, then checks every run
of the concurrent server: its conversation valid in three dialects (Anthropic, OpenAI Chat,
OpenAI Responses), and a sample replayed byte-exact.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from runfold.api import Workspace

TURNS = 10


def make_workspace(root: Path) -> Path:
    Workspace.init(root)
    for i in range(TURNS - 1):
        (root / f"d{i}").mkdir()
    return root


def write_script(path: Path) -> Path:
    """Ten turns: nine replies each listing one directory, then the answer (no delay)."""
    entries: list[dict[str, Any]] = [
        {
            "content": [
                {"kind": "text", "text": f"step {i}"},
                {"kind": "tool_use", "id": f"t{i}", "name": "list_dir", "input": {"path": f"d{i}"}},
            ]
        }
        for i in range(TURNS - 1)
    ]
    entries.append({"content": [{"kind": "text", "text": "all done"}]})
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


class Server:
    """`runfold serve --port 0` on a workspace, in a child process."""

    def __init__(self, root: Path, max_runs: int) -> None:
        self.root = root
        env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runfold", "serve", "-w", str(root), "--port", "0", "--max-runs", str(max_runs)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        info = root / ".runfold" / "serve" / "serve.json"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                obj = json.loads(info.read_text())
                if obj["pid"] == self.proc.pid:
                    self.url = obj["url"] + "/api"
                    return
            except (OSError, ValueError, KeyError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            time.sleep(0.05)
        raise RuntimeError("the server did not start")

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server used so far: robust on a loaded machine."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


@dataclass
class Figures:
    way: str
    runs: int
    seconds: float
    lines: int
    batches: int
    peak_rss_mib: float
    cpu_s: float

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.seconds

    @property
    def runs_per_cpu_s(self) -> float:
        return self.runs / max(self.cpu_s, 1e-9)

    @property
    def lines_per_batch(self) -> float:
        return self.lines / max(1, self.batches)


async def _wait_idle(client: httpx.AsyncClient) -> dict[str, Any]:
    while True:
        info = (await client.get("/server")).json()
        if info["running"] == 0 and info["queued"] == 0:
            return info
        await asyncio.sleep(0.05)


async def concurrent(root: Path, script: Path, n: int) -> tuple[Figures, list[str]]:
    srv = Server(root, max_runs=n)
    try:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=srv.url, timeout=600, limits=limits) as client:
            before = (await client.get("/server")).json()
            cpu0 = srv.cpu_s()
            start = time.perf_counter()
            answers = await asyncio.gather(
                *(client.post("/runs", json={"task": f"job {i}", "model": f"script:{script}"}) for i in range(n))
            )
            runs = [a.json()["run"] for a in answers]
            after = await _wait_idle(client)
            seconds = time.perf_counter() - start
        rss = srv.peak_rss_kib() / 1024
        cpu = srv.cpu_s() - cpu0
    finally:
        srv.stop()
    lines = after["next_seq"] - before["next_seq"]
    return Figures("one server, all at once", n, seconds, lines, after["batches"] - before["batches"], rss, cpu), runs


async def one_at_a_time(root: Path, script: Path, n: int) -> Figures:
    srv = Server(root, max_runs=1)
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=600) as client:
            before = (await client.get("/server")).json()
            cpu0 = srv.cpu_s()
            start = time.perf_counter()
            for i in range(n):
                run = (await client.post("/runs", json={"task": f"job {i}", "model": f"script:{script}"})).json()["run"]
                async with client.stream("GET", f"/runs/{run}/events") as resp:
                    async for _ in resp.aiter_lines():
                        pass
            after = (await client.get("/server")).json()
            seconds = time.perf_counter() - start
        rss = srv.peak_rss_kib() / 1024
        cpu = srv.cpu_s() - cpu0
    finally:
        srv.stop()
    lines = after["next_seq"] - before["next_seq"]
    return Figures("one server, one at a time", n, seconds, lines, after["batches"] - before["batches"], rss, cpu)


def check_runs(root: Path, runs: list[str], sample: int) -> dict[str, Any]:
    """Every run done with a conversation valid in every dialect; `sample` runs replayed."""
    invalid: list[str] = []
    not_done: list[str] = []
    with Workspace.open(root) as ws:
        ws.verify()
        status = {s.run: s.status for s in ws.run_summaries()}
        for run in runs:
            if status.get(run) != "done":
                not_done.append(run)
            view = ws.request_at(run)
            if len(view.verdicts) < 3 or any(view.verdicts.values()):
                invalid.append(run)
        picked = random.Random(7).sample(runs, min(sample, len(runs)))
        replays = [ws.replay(r) for r in picked]
    exact = sum(1 for r in replays if r.ok and r.requests == TURNS)
    return {
        "runs": len(runs),
        "not_done": len(not_done),
        "invalid_in_some_dialect": len(invalid),
        "dialects": 3,
        "replayed": len(replays),
        "replay_byte_exact": exact,
    }


def table(figs: list[Figures]) -> list[str]:
    head = (
        f"{'way':28} {'runs':>6} {'seconds':>8} {'runs/s':>8} {'lines/s':>9} {'fsyncs':>7} {'lines/fsync':>11} "
        f"{'peak RSS':>9} {'server CPU s':>12} {'runs/CPU s':>10}"
    )
    rows = [head]
    for f in figs:
        rows.append(
            f"{f.way:28} {f.runs:>6} {f.seconds:>8.1f} {f.runs_per_s:>8.1f} {f.lines_per_s:>9.0f} "
            f"{f.batches:>7} {f.lines_per_batch:>11.1f} {f.peak_rss_mib:>7.0f} MiB {f.cpu_s:>12.1f} {f.runs_per_cpu_s:>10.1f}"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--sample", type=int, default=20, help="runs replayed byte-exact")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="runfold-bench-serve-") as tmp:
        base = Path(tmp)
        script = write_script(base / "ten.jsonl")
        fig_c, runs = asyncio.run(concurrent(make_workspace(base / "together"), script, args.runs))
        fig_s = asyncio.run(one_at_a_time(make_workspace(base / "serial"), script, args.runs))
        checks = check_runs(base / "together", runs, args.sample)
    rows = table([fig_c, fig_s])
    print("\n".join(rows))
    print(
        f"group commit: {fig_c.lines_per_batch / max(fig_s.lines_per_batch, 1e-9):.1f}x the lines per fsync "
        f"({fig_c.lines_per_batch:.1f} vs {fig_s.lines_per_batch:.1f}); "
        f"throughput {fig_c.runs_per_s / fig_s.runs_per_s:.1f}x the runs/s, "
        f"{fig_c.runs_per_cpu_s / fig_s.runs_per_cpu_s:.1f}x the runs per server CPU second "
        f"(the machine's load average was {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"checks: {checks['runs'] - checks['not_done']}/{checks['runs']} runs done, "
        f"{checks['runs'] - checks['invalid_in_some_dialect']}/{checks['runs']} valid in 3 dialects, "
        f"{checks['replay_byte_exact']}/{checks['replayed']} sampled runs replayed byte-exact ({TURNS} requests each)"
    )
    if args.json is not None:
        derived = [
            asdict(f) | {"runs_per_s": f.runs_per_s, "lines_per_s": f.lines_per_s, "lines_per_fsync": f.lines_per_batch}
            for f in (fig_c, fig_s)
        ]
        args.json.write_text(json.dumps({"figures": derived, "checks": checks}, indent=2))


if __name__ == "__main__":
    main()
