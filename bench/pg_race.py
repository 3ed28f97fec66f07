"""Two writers racing for one workspace on PostgreSQL, with kills: never two appenders, never a
gap or a fork in the chain.

Each trial starts two writer processes (each with its own connection) on one workspace; each
waits for the writer lease, appends batches of lines tagged with its name, and closes. One of
the two, picked at random, is killed with SIGKILL within 40 ms of the first one taking the
lease: the holder mid-append, or the one waiting for it. After every trial the whole
chain is verified from the server (no gap, no fork, no bad line) and the trial's lines are read in
seq order: the writers' tags must form at most one block each (two appenders at once would
interleave them).

    python bench/pg_race.py                 # 100 trials on a throwaway server
    python bench/pg_race.py --trials 300 --dsn postgresql://…
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
BATCHES = 8
LINES = 5


def _worker(ws: str, tag: str, run: str) -> None:
    """One racing writer: wait for the lease, append BATCHES batches of LINES lines tagged
    `tag`, close."""
    from runfold.core.errors import ErrorCode, RunfoldError
    from runfold.core.records import Draft
    from runfold.store.backend import open_ledger

    deadline = time.monotonic() + 120
    while True:
        try:
            w = open_ledger(Path(ws), writer=True)
            break
        except RunfoldError as exc:
            if exc.code is not ErrorCode.LEDGER_HELD or time.monotonic() > deadline:
                raise
            time.sleep(0.005)
    print("holding", flush=True)
    with w:
        for i in range(BATCHES):
            drafts = [
                Draft(run, "lab/race", "steer_received", {"source": "user", "text": f"{tag} {i}.{k}"})
                for k in range(LINES)
            ]
            w.append(drafts)
            time.sleep(0.002)


def _first_holder(procs: dict[str, subprocess.Popen[bytes]]) -> str:
    """The tag of the worker that says it holds the lease first (waits up to 120 s)."""
    import selectors

    sel = selectors.DefaultSelector()
    for tag, p in procs.items():
        assert p.stdout is not None
        sel.register(p.stdout, selectors.EVENT_READ, tag)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                if key.fileobj.readline().strip() == b"holding":  # type: ignore[union-attr]
                    return str(key.data)
        raise RuntimeError("no writer took the lease within 120 s")
    finally:
        sel.close()


def race(dsn: str, trials: int, seed: int = 1, progress: bool = False) -> dict[str, int]:
    """Run `trials` races on a fresh workspace of the server at `dsn`; returns counts:
    trials, kills, holder_kills (kills of the writer holding the lease, mid-append), lines,
    both_appended (trials whose lines interleave two writers), chain_faults (verifications
    that failed)."""
    sys.path.insert(0, str(SRC))
    from runfold.api import Workspace
    from runfold.core.errors import RunfoldError

    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="runfold-race-"))
    url = f"{dsn}&workspace=race-{uuid.uuid4().hex[:10]}"
    Workspace.init(root / "ws", url).close()
    ws = root / "ws"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = {"trials": 0, "kills": 0, "holder_kills": 0, "lines": 0, "both_appended": 0, "chain_faults": 0}
    for trial in range(trials):
        runs = {tag: str(uuid.uuid4()) for tag in ("A", "B")}
        procs = {
            tag: subprocess.Popen(
                [sys.executable, __file__, "--worker", str(ws), f"{trial}{tag}", run],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for tag, run in runs.items()
        }
        holder = _first_holder(procs)
        victim = rng.choice(sorted(procs))  # the holder mid-append, or the one waiting for it
        time.sleep(rng.uniform(0.0, 0.04))
        procs[victim].send_signal(signal.SIGKILL)
        out["kills"] += 1
        out["holder_kills"] += victim == holder
        for tag, p in procs.items():
            p.wait(timeout=180)
            if tag != victim and p.returncode != 0:
                assert p.stderr is not None
                raise RuntimeError(f"writer {trial}{tag} failed: {p.stderr.read().decode()[-2000:]}")
        for p in procs.values():
            assert p.stderr is not None and p.stdout is not None
            p.stderr.close()
            p.stdout.close()
        try:
            report = Workspace.open(ws).verify()
        except RunfoldError:
            out["chain_faults"] += 1
            continue
        out["lines"] = report.lines
        lines = Workspace.open(ws).records(since=max(0, report.lines - 2 * BATCHES * LINES - 1))
        tags = [r.env.data["text"].split()[0] for r in lines if r.env.run in runs.values()]
        blocks = [t for i, t in enumerate(tags) if i == 0 or tags[i - 1] != t]
        if len(blocks) != len(set(blocks)):
            out["both_appended"] += 1
        out["trials"] += 1
        if progress and (trial + 1) % 10 == 0:
            print(f"  {trial + 1}/{trials} trials: {out}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dsn", help="a server to use (default: a throwaway one)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker)
        return
    server: Any = None
    dsn = args.dsn
    if dsn is None:
        from _pg import Postgres

        server = Postgres()
        dsn = server.dsn
    try:
        started = time.perf_counter()
        result = race(dsn, args.trials, args.seed, progress=not args.json)
        seconds = time.perf_counter() - started
    finally:
        if server is not None:
            server.stop()
    if args.json:
        print(json.dumps({**result, "seconds": round(seconds, 1)}))
        return
    print(
        f"{result['trials']} trials, {result['kills']} kills ({result['holder_kills']} of the writer "
        f"holding the lease, mid-append), {result['lines']} lines in the chain, "
        f"{seconds:.0f} s"
    )
    print(f"trials with two appenders: {result['both_appended']}")
    print(f"chain faults (gap, fork, bad line): {result['chain_faults']}")
    ok = result["both_appended"] == 0 and result["chain_faults"] == 0 and result["trials"] == args.trials
    print("ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
