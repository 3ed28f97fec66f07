"""The kill test: real `runfold run` processes SIGKILLed at random moments.

Each trial starts `python -m runfold run --events` on a fresh workspace with a random scripted
session — model delays (the stand-in for streaming), parallel waves mixing writing tools
(write_file, edit_file, exec `sleep`) with read-only ones (read_file, list_dir, search) — and
kills it with SIGKILL after a random durable line plus a random delay, or at a random time: while
the model answers, between `tool_called` and `tool_result`, around a batch's fsync, between turns.
A line printed on `--events` was fsynced before it was printed: that is "acknowledged".

After each kill: `runfold resume` and `runfold verify` pass; every acknowledged line is in the
ledger with its seq and hash; every tool call has exactly one result (the ones the dead process
left open closed with E_TOOL_OUTCOME_UNKNOWN by resume); every run is frozen; every request of
every run, and the tail a successor inherits, is valid in all three dialects and extends the
request before it; replay of the killed run is byte-exact; `runfold continue` of the killed run
through an official SDK gets its first request accepted by the provider test server, and replay
of the successor is byte-exact. Zero failures.

RUNFOLD_KILL_TRIALS sets the number of trials (default 300, the issue's proof), RUNFOLD_KILL_SEED the first seed,
RUNFOLD_KILL_WORKERS how many runs are in flight at once (default 3).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from crash_support import cli, history_problems, tail_problems

from provider_server import ProviderServer
from runfold.api import Workspace

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

TRIALS = int(os.environ.get("RUNFOLD_KILL_TRIALS", "300"))
"""300 by default, the issue's proof (≈ 4 minutes alone on a loaded 2-core machine); set it
lower for a quick local run."""
SEED = int(os.environ.get("RUNFOLD_KILL_SEED", "20261130"))
WORKERS = int(os.environ.get("RUNFOLD_KILL_WORKERS", "3"))

CONTINUE_WITH = [
    ("anthropic:test-model", "ANTHROPIC"),
    ("openai:test-model", "OPENAI"),
    ("openai-responses:test-model", "OPENAI"),
]
"""The successor's model rotates through the three dialects (any model may continue any run)."""


def _use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


def make_session(rng: random.Random) -> tuple[list[dict[str, Any]], int]:
    """A random scripted session and the number of lines its run writes when not killed."""
    entries: list[dict[str, Any]] = []
    lines = 1  # run_started
    written: list[str] = []
    n = 0
    for turn in range(rng.randint(1, 3)):
        calls: list[dict[str, Any]] = []
        for _ in range(rng.choice((1, 2, 2, 3, 3))):
            n += 1
            cid = f"toolu_{turn}{n:02d}"
            pick = rng.random()
            if pick < 0.25 or not written:
                path = f"f{n}.txt"
                written.append(path)
                calls.append(
                    _use(cid, "write_file", {"path": path, "content": f"line {n}\n" * rng.randint(1, 40)})
                )
            elif pick < 0.4:
                calls.append(
                    _use(cid, "edit_file", {"path": rng.choice(written), "old": "line", "new": "LINE"})
                )
            elif pick < 0.6:
                ms = rng.choice((20, 50, 120, 250))
                calls.append(_use(cid, "exec", {"command": f"sleep {ms / 1000}"}))
            elif pick < 0.75:
                calls.append(_use(cid, "read_file", {"path": rng.choice([*written, "missing.txt"])}))
            elif pick < 0.9:
                calls.append(_use(cid, "list_dir", {"path": "."}))
            else:
                calls.append(_use(cid, "search", {"pattern": "line"}))
        content: list[dict[str, Any]] = [*calls]
        if rng.random() < 0.6:
            content.insert(0, {"kind": "text", "text": f"turn {turn}: {len(calls)} call(s)"})
        entries.append({"content": content, "delay_ms": rng.choice((0, 5, 30, 80, 200))})
        lines += (1 if turn == 0 else 0) + 3 + 2 * len(calls)  # assembled?, shape, called, returned
    entries.append({"content": [{"kind": "text", "text": "all done"}], "delay_ms": rng.choice((0, 40))})
    lines += 3 + 2  # shape, called, returned; handoff, frozen
    return entries, lines


@dataclass
class Trial:
    """One killed (or finished) process and what it acknowledged."""

    index: int
    root: Path
    how: str
    acknowledged: list[dict[str, Any]] = field(default_factory=list)
    killed: bool = False
    exit_code: int | None = None
    stderr: str = ""


def run_and_kill(index: int, base: Path) -> Trial:
    """Start a run on a fresh workspace and SIGKILL it at the trial's random moment."""
    rng = random.Random(SEED + index)
    root = base / f"t{index}"
    Workspace.init(root).close()
    session, lines = make_session(rng)
    script = base / f"t{index}.jsonl"
    script.write_text("".join(json.dumps(e) + "\n" for e in session), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RUNFOLD_WORKSPACE", "PYTHONDONTWRITEBYTECODE")}
    env["NO_COLOR"] = "1"
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")  # compile once, not in all 300 processes
    if rng.random() < 0.7:
        # kill after this durable line (0-based), then a jitter; lines are printed per fsynced
        # batch and the last batch holds the freeze, so aim below it
        after = min(rng.randrange(0, lines - 1), rng.randrange(0, lines - 1))
        delay = rng.choice((0.0, 0.0, 0.001, 0.004, 0.015, 0.05))
        how = f"after line {after + 1}/{lines} +{delay * 1000:.0f}ms"
    else:
        after, delay = 0, rng.uniform(0.0, 0.6)
        how = f"{delay * 1000:.0f}ms after the first durable line"
    trial = Trial(index, root, how)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", f"trial {index}", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    err_reader = threading.Thread(target=lambda: setattr(trial, "stderr", proc.stderr.read().decode()))
    err_reader.start()
    timer: threading.Timer | None = None
    try:
        while raw := proc.stdout.readline():
            if not raw.endswith(b"\n"):
                break  # cut mid-line by the kill: not acknowledged
            trial.acknowledged.append(json.loads(raw))
            if len(trial.acknowledged) == after + 1 and timer is None:
                timer = threading.Timer(delay, _kill, (proc, trial))
                timer.start()
        proc.wait(timeout=120)
    finally:
        if timer is not None:
            timer.cancel()
        if proc.poll() is None:
            _kill(proc, trial)
            proc.wait()
        err_reader.join()
    trial.exit_code = proc.returncode
    # the process may have ended on its own between the timer's check and its signal
    trial.killed = trial.killed and proc.returncode == -signal.SIGKILL
    return trial


def _kill(proc: subprocess.Popen[bytes], trial: Trial) -> None:
    if proc.poll() is None:
        trial.killed = True
        proc.send_signal(signal.SIGKILL)


def check_trial(trial: Trial, server: ProviderServer) -> str:
    """Every check of the module docstring on one trial; returns the killed run's status."""
    root, where = trial.root, f"trial {trial.index} ({trial.how})"
    if not trial.killed:
        assert trial.exit_code == 0, f"{where}: the run ended {trial.exit_code}: {trial.stderr}"
    else:
        assert trial.exit_code == -signal.SIGKILL, where
    before = Workspace.open(root)
    tail_before = before.verify().lines
    before.close()
    res = cli("resume", "--json", "-w", root, cwd=root)
    assert res.code == 0, f"{where}: resume: {res.out}{res.err}"
    resumed = json.loads(res.out)
    assert cli("verify", "-w", root, cwd=root).code == 0, where
    ws = Workspace.open(root)
    try:
        for ack in trial.acknowledged:
            rec = ws.record_at(ack["seq"])
            assert (rec.hash, rec.run, rec.kind_name) == (ack["hash"], ack["run"], ack["kind"]), (
                f"{where}: acknowledged line {ack} differs from the ledger"
            )
        written = ws.records()[tail_before:] if tail_before < len(ws.records()) else []
        closed = {c["tool_use_id"] for c in resumed["closed"]}
        for rec in written:
            if rec.kind_name == "tool_result" and rec.env.data["tool_use_id"] in closed:
                assert rec.env.data["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN", where
            elif rec.kind_name == "tool_result":  # asked for, never recorded: the wave is completed
                assert "not started" in rec.env.data["error"]["action"], where
            if rec.kind_name == "run_frozen":
                assert rec.env.data.get("cause") == "process_died", where
        assert len(resumed["closed"]) == sum(
            1 for r in written if r.kind_name == "tool_result" and r.env.data["tool_use_id"] in closed
        ), where
        problems = history_problems(ws)
        assert not problems, f"{where}: {problems}"
        runs = ws.runs()
        if not runs:
            return "no run"  # killed before run_started was durable
        (run,) = runs
        problems = tail_problems(ws, run)
        assert not problems, f"{where}: {problems}"
        replay = ws.replay(run)
        assert replay.ok, f"{where}: {replay.summary()}"
        status = ws.records(run=run)[-1].env.data["completion"]
        last_ack = max((a["seq"] for a in trial.acknowledged), default=0)
        if tail_before - 1 > last_ack:  # written, not yet printed: killed in or right after a flush
            status += ", mid-flush"
    finally:
        ws.close()
    if not trial.killed:
        return "finished"
    spec, prefix = CONTINUE_WITH[trial.index % len(CONTINUE_WITH)]
    url = server.anthropic_url if prefix == "ANTHROPIC" else server.openai_url
    seen = len(server.requests)
    server.push({"content": [{"kind": "text", "text": "picked it up and finished"}]})
    res = cli(
        "continue",
        run,
        "--model",
        spec,
        "--json",
        "-w",
        root,
        cwd=root,
        env={f"{prefix}_API_KEY": "test-key", f"{prefix}_BASE_URL": url},
    )
    got = server.requests[seen:]
    assert got and got[0].entry is not None and got[0].status == 200, (
        f"{where}: the server refused the successor's first request: {[(r.status, r.error) for r in got]}"
    )
    assert res.code == 0, f"{where}: continue: {res.out}{res.err}"
    successor = json.loads(res.out)["run"]
    replay = cli("replay", successor, "-w", root, cwd=root)
    assert replay.code == 0 and "byte-exact" in replay.out, f"{where}: {replay.out}"
    return f"killed, {status}"


@pytest.fixture(scope="module")
def server() -> Any:
    with ProviderServer([]) as s:
        yield s


def test_sigkill_at_random_moments(tmp_path: Path, server: ProviderServer) -> None:
    started = time.monotonic()
    seen: Counter[str] = Counter()
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = [pool.submit(run_and_kill, i, tmp_path) for i in range(TRIALS)]
        checking = 0.0
        for fut in futures:  # checked in order, one at a time (the CLI runs in this process)
            trial = fut.result()
            t0 = time.monotonic()
            seen[check_trial(trial, server)] += 1
            checking += time.monotonic() - t0
    took = time.monotonic() - started
    print(f"\nkill test: {TRIALS} trials in {took:.0f} s ({checking:.0f} s checking): {dict(seen)}")
    killed = sum(n for k, n in seen.items() if k.startswith("killed"))
    assert killed >= TRIALS * 0.8, f"too few trials were killed mid-run: {dict(seen)}"
