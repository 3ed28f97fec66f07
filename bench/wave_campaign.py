"""A campaign of cancels, SIGTERMs and SIGKILLs at random moments of runs whose waves mix fast and
slow `exec` and read calls (DESIGN.md §5, §7): what survives a stop mid-wave.

Usage: python bench/wave_campaign.py [--trials 300] [--seed S] [--workers 3] [--json PATH].
Each trial starts `python -m runfold run --events` on a fresh workspace with a random scripted
session (one to three waves of one to five calls: `exec` of a fast command or a `sleep` that then
writes a file, `read_file`, `list_dir`) and stops it after a random durable line plus a random
delay (most often the n-th durable `tool_called`, so the stop lands inside a wave) with SIGINT (the person's Ctrl-C), SIGTERM, SIGHUP or SIGKILL (then `runfold resume`).
Then, per trial: the history is valid (every call answered once, every run frozen last, every
request and the successor's tail valid in all three dialects, replay exact); a successor
(`continue`) sees every call of the run with its fate — no finished call missing from its
conversation — and its note names each unknown or never-started call of the last wave; and no
process the run's `exec` started is alive afterwards. It prints the counts and every failure.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runfold.api import Workspace
from runfold.core.fold.resume import is_not_started
from runfold.core.payloads import ToolResult
from runfold.providers.scripted import ScriptedProvider

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL)


def _use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


def make_session(rng: random.Random, mark: str) -> list[dict[str, Any]]:
    """A random scripted session: waves of fast and slow `exec` and read calls, then an answer.
    Every command carries `mark` so the processes it starts can be found afterwards."""
    entries: list[dict[str, Any]] = []
    n = 0
    for turn in range(rng.randint(1, 3)):
        calls = []
        for _ in range(rng.randint(1, 5)):
            n += 1
            cid = f"toolu_{turn}_{n:02d}"
            pick = rng.random()
            if pick < 0.3:
                calls.append(_use(cid, "exec", {"command": f"echo fast {n} > fast{n}.txt # {mark}"}))
            elif pick < 0.6:
                ms = rng.choice((50, 150, 400, 900))
                cmd = f"sleep {ms / 1000} && echo late {n} > late{n}.txt # {mark}"
                calls.append(_use(cid, "exec", {"command": cmd}))
            elif pick < 0.8:
                calls.append(_use(cid, "read_file", {"path": rng.choice(["notes.txt", "missing.txt"])}))
            else:
                calls.append(_use(cid, "list_dir", {"path": "."}))
        content: list[dict[str, Any]] = [*calls]
        if rng.random() < 0.5:
            content.insert(0, {"kind": "text", "text": f"wave {turn}"})
        entries.append({"content": content, "delay_ms": rng.choice((0, 10, 60))})
    entries.append({"content": [{"kind": "text", "text": "all done"}]})
    return entries


@dataclass
class Trial:
    index: int
    how: str = ""
    after_lines: int = 0
    delay_ms: int = 0
    exit_code: int | None = None
    stopped_mid_wave: bool = False
    finished_calls: int = 0
    unknown_calls: int = 0
    unstarted_calls: int = 0
    problems: list[str] = field(default_factory=list)


def _alive(mark: str) -> list[int]:
    """Pids of live processes whose command line holds `mark` (zombies excluded)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in cmdline and state != "Z":
            pids.append(int(entry))
    return pids


def _fates(ws: Workspace, run: str) -> tuple[dict[str, ToolResult], list[str]]:
    """The run's results by call id, and the call ids of its last wave."""
    results: dict[str, ToolResult] = {}
    last_wave: list[str] = []
    for rec in ws.records(run=run):
        if rec.kind_name == "model_returned":
            ids = [b["id"] for b in rec.env.data["message"].get("content", []) if b.get("kind") == "tool_use"]
            if ids:
                last_wave = ids
        elif rec.kind_name == "tool_result":
            res = rec.typed(ToolResult)
            results[res.tool_use_id] = res
    return results, last_wave


def check(root: Path, run: str, trial: Trial, mark: str) -> None:
    """Every check of one trial after its process ended (and resume, after a SIGKILL)."""
    time.sleep(0.3)
    alive = _alive(mark)
    if alive:
        trial.problems.append(f"processes of exec still alive: {alive}")
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    ws = Workspace.open(root)
    try:
        if not ws.verify().lines:
            trial.problems.append("verify read no line")
        lines = ws.records(run=run)
        kinds = [r.kind_name for r in lines]
        if kinds.count("run_frozen") != 1 or kinds[-1] != "run_frozen":
            trial.problems.append(f"run not frozen once and last: {kinds[-3:]}")
            return
        called = [r.env.data["id"] for r in lines if r.kind_name == "tool_called"]
        answered = [r.env.data["tool_use_id"] for r in lines if r.kind_name == "tool_result"]
        if sorted(called) != sorted(answered) or len(set(called)) != len(called):
            trial.problems.append(f"calls and results differ: {called} vs {answered}")
        results, last_wave = _fates(ws, run)
        asked = [
            b["id"]
            for r in lines
            if r.kind_name == "model_returned"
            for b in r.env.data["message"].get("content", [])
            if b.get("kind") == "tool_use"
        ]
        dropped = [cid for cid in asked if cid not in results]
        if dropped:
            trial.problems.append(f"calls asked for with no result (a wave dropped): {dropped}")
        unknown = [c for c in last_wave if c in results and _unknown(results[c])]
        unstarted = [c for c in last_wave if c in results and is_not_started(results[c])]
        trial.stopped_mid_wave = bool(unknown or unstarted)
        trial.finished_calls = sum(1 for r in results.values() if r.error is None)
        trial.unknown_calls, trial.unstarted_calls = len(unknown), len(unstarted)
        view = ws.request_at(run)
        for dialect, verdicts in view.verdicts.items():
            if verdicts:
                trial.problems.append(f"tail invalid in {dialect}: {verdicts[:2]}")
        if not ws.replay(run).ok:
            trial.problems.append("replay of the run is not exact")
        successor = _continue(ws, run, trial)
        if successor is None:
            return
        _check_successor(ws, run, successor, results, unknown, unstarted, trial)
    finally:
        ws.close()


def _unknown(res: ToolResult) -> bool:
    return res.error is not None and res.error.get("code") == "E_TOOL_OUTCOME_UNKNOWN"


def _continue(ws: Workspace, run: str, trial: Trial) -> str | None:
    async def main() -> str:
        out = await ws.arun(
            "", continues=run, model=ScriptedProvider.of([{"content": [{"kind": "text", "text": "ok"}]}])
        )
        if out.completion != "done":
            trial.problems.append(f"successor ended {out.completion}: {out.reason}")
        return out.run_id

    try:
        return asyncio.run(main())
    except Exception as exc:  # a failure to continue is a finding, not a crash of the campaign
        trial.problems.append(f"continue failed: {type(exc).__name__}: {exc}")
        return None


def _check_successor(
    ws: Workspace,
    run: str,
    successor: str,
    results: dict[str, ToolResult],
    unknown: list[str],
    unstarted: list[str],
    trial: Trial,
) -> None:
    first_called = next(r.seq for r in ws.records(run=successor, kind="model_called"))
    fold = ws.fold(successor, first_called - 1)
    seen = {
        b["tool_use_id"]: b
        for m in fold.conversation.messages_view()
        for b in m["content"]
        if b["kind"] == "tool_result"
    }
    missing = [cid for cid, r in results.items() if r.error is None and cid not in seen]
    if missing:
        trial.problems.append(f"finished calls missing from the successor's conversation: {missing}")
    (note,) = [r.env.data["text"] for r in ws.records(run=successor, kind="steer_received")][:1] or [""]
    for cid in unknown + unstarted:
        if f"(call {cid})" not in note:
            trial.problems.append(f"the successor's note does not name call {cid}")
    if not ws.replay(successor).ok:
        trial.problems.append("replay of the successor is not exact")
    for dialect, verdicts in ws.request_at(successor).verdicts.items():
        if verdicts:
            trial.problems.append(f"successor invalid in {dialect}: {verdicts[:2]}")


def run_trial(index: int, seed: int, base: Path) -> Trial:
    rng = random.Random(seed + index)
    trial = Trial(index)
    root = base / f"t{index}"
    Workspace.init(root).close()
    (root / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    mark = f"wavemark-{os.getpid()}-{seed}-{index}"
    script = base / f"t{index}.jsonl"
    script.write_text("".join(json.dumps(e) + "\n" for e in make_session(rng, mark)), encoding="utf-8")
    how = rng.choice(SIGNALS)
    trial.how = how.name
    at_call = rng.random() < 0.7  # most stops land while a tool call runs
    trial.after_lines = rng.randint(1, 4) if at_call else rng.randint(1, 14)
    trial.delay_ms = rng.choice((0, 0, 20, 80, 200, 500))
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "do the waves", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdout is not None
    run = ""
    seen = 0
    for raw in proc.stdout:
        event = json.loads(raw)
        run = event["run"]
        if at_call and event["kind"] != "tool_called":
            continue  # count only the durable tool_called lines (a call has just started)
        seen += 1
        if seen >= trial.after_lines:
            break
    time.sleep(trial.delay_ms / 1000)
    if proc.poll() is None:
        os.kill(proc.pid, how)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        trial.problems.append("the process did not end within 60 s of the signal")
    trial.exit_code = proc.returncode
    if how is not signal.SIGKILL and proc.returncode not in (0, 6):
        trial.problems.append(f"{how.name}: exit code {proc.returncode} (expected 6, or 0 when it had finished)")
    if not run:
        trial.problems.append("no line was acknowledged")
        return trial
    if how is signal.SIGKILL or proc.returncode not in (0, 6):
        res = subprocess.run(
            [sys.executable, "-m", "runfold", "resume", "--json"], cwd=root, env=env, capture_output=True, timeout=60
        )
        if res.returncode != 0:
            trial.problems.append(f"resume exited {res.returncode}: {res.stderr[-300:]!r}")
    try:
        check(root, run, trial, mark)
    except Exception as exc:
        trial.problems.append(f"check raised {type(exc).__name__}: {exc}")
    return trial


def campaign(trials: int, seed: int, workers: int, base: Path) -> list[Trial]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda i: run_trial(i, seed, base), range(trials)))


def summary(done: list[Trial]) -> dict[str, Any]:
    """The campaign's figures: trials by signal, stops mid-wave, calls by fate, failures."""
    failed = [t for t in done if t.problems]
    return {
        "trials": len(done),
        "by_signal": dict(Counter(t.how for t in done)),
        "stopped_mid_wave": sum(t.stopped_mid_wave for t in done),
        "finished_calls": sum(t.finished_calls for t in done),
        "unknown_calls": sum(t.unknown_calls for t in done),
        "never_started_calls": sum(t.unstarted_calls for t in done),
        "failed_trials": len(failed),
        "failures": [{"trial": t.index, "how": t.how, "problems": t.problems} for t in failed],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        done = campaign(args.trials, args.seed, args.workers, Path(tmp))
    figures = summary(done)
    figures["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps({k: v for k, v in figures.items() if k != "failures"}, indent=2))
    for failure in figures["failures"]:
        print(f"trial {failure['trial']} ({failure['how']}): " + "; ".join(failure["problems"]))
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": figures, "trials": [asdict(t) for t in done]}, indent=2) + "\n")
    sys.exit(1 if figures["failed_trials"] else 0)


if __name__ == "__main__":
    main()
