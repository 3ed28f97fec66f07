"""Start-up time of the `runfold` command: `runfold --help`, `runfold verify LEDGER` and
`runfold log -w LEDGER` on a small ledger, each as a whole process, next to `python -c pass`
(the interpreter's own start-up, the floor no command can beat).

Each command runs `--runs` times (default 15) alternating with the others; the table gives the
median wall time, the ratio to `python -c pass`, the goal (--help ≤ 0.2 s, verify ≤ 0.3 s) and
the median CPU time of the process (user + system), the steadier figure on a shared machine.
Usage: python bench/startup.py [--runs N] [--ledger FILE] [--json FILE].
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL_LEDGER = REPO / "examples" / "sprawling-golden-p0.jsonl"

GOALS_S = {"runfold --help": 0.2, "runfold verify": 0.3}
"""The start-up goal of a command, in seconds of median wall time."""


@dataclass(frozen=True, slots=True)
class Timing:
    """One command's wall times and CPU times (user + system) in seconds, one per run."""

    name: str
    argv: tuple[str, ...]
    seconds: tuple[float, ...]
    cpu_seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_seconds)


def runfold_argv() -> list[str]:
    """How to start the `runfold` command: the console script next to this interpreter when it
    exists (what a user runs), else `python -m runfold`."""
    script = Path(sys.executable).parent / "runfold"
    if script.exists():
        return [str(script)]
    found = shutil.which("runfold")
    return [found] if found else [sys.executable, "-m", "runfold"]


def commands(ledger: Path) -> dict[str, list[str]]:
    """The measured commands, by the name the table shows."""
    runfold = runfold_argv()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "runfold --help": [*runfold, "--help"],
        "runfold verify": [*runfold, "verify", str(ledger)],
        "runfold log": [*runfold, "log", "-w", str(ledger)],
    }


def measure(ledger: Path, runs: int) -> list[Timing]:
    """Each command `runs` times, round-robin so that a change of the machine's load falls on all
    of them alike, after one unmeasured round that leaves the bytecode cached, as `pip install`
    leaves it (PYTHONDONTWRITEBYTECODE is dropped: with it set, every run would compile each
    changed module again). Raises RuntimeError when a command fails (its figure would mean
    nothing)."""
    todo = commands(ledger)
    dropped = ("RUNFOLD_WORKSPACE", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    for argv in todo.values():
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    times: dict[str, list[float]] = {name: [] for name in todo}
    cpu: dict[str, list[float]] = {name: [] for name in todo}
    for _ in range(runs):
        for name, argv in todo.items():
            before = _children_cpu_s()
            t0 = time.perf_counter()
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(_children_cpu_s() - before)
            if done.returncode != 0:
                raise RuntimeError(f"{name} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return [Timing(name, tuple(todo[name]), tuple(times[name]), tuple(cpu[name])) for name in todo]


def _children_cpu_s() -> float:
    """User + system seconds of every finished child process of this one."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def table(timings: list[Timing]) -> list[str]:
    """The report: one row per command (median, min, max, ratio to `python -c pass`, median CPU,
    goal), then the load average."""
    floor = next(t.median_s for t in timings if t.name == "python -c pass")
    rows = [
        f"{'command':<16} {'runs':>4} {'median s':>9} {'min s':>7} {'max s':>7} {'× python':>9} {'CPU s':>6}  goal",
        "-" * 77,
    ]
    for t in timings:
        goal = GOALS_S.get(t.name)
        verdict = "" if goal is None else f"≤ {goal} s: {'met' if t.median_s <= goal else 'MISSED'}"
        rows.append(
            f"{t.name:<16} {len(t.seconds):>4} {t.median_s:>9.3f} {min(t.seconds):>7.3f} "
            f"{max(t.seconds):>7.3f} {t.median_s / floor:>9.1f} {t.median_cpu_s:>6.3f}  {verdict}".rstrip()
        )
    if hasattr(os, "getloadavg"):
        rows.append(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="runs of each command (median of them; ≥ 1)")
    ap.add_argument("--ledger", type=Path, default=SMALL_LEDGER, help="the small ledger verify and log read")
    ap.add_argument("--json", type=Path, help="also write the timings as JSON to this file")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    timings = measure(args.ledger, args.runs)
    print("\n".join(table(timings)))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {"name": t.name, "argv": t.argv, "seconds": t.seconds, "cpu_seconds": t.cpu_seconds}
                    for t in timings
                ],
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
