"""The context window's proof over random runs (DESIGN.md §6, §7, §10): parallel waves,
oversized results, steers by the person, the runtime and a letter, summaries, tiny budgets,
forks at every seq, and real kills of the running process followed by resume and continue.

For every request any of those runs sent (`proof_support.request_problems`): valid in all three
dialects, under its budget, replay byte-exact, the bytes attributed to (line, cause) adding up to
the request's bytes exactly, and only the person's text opening with `user:`.

RUNFOLD_PROOF_EXAMPLES sets the in-process examples (default 120, about 15 s); the killed part
runs an eighth as many (at least 16). A longer campaign: RUNFOLD_PROOF_EXAMPLES=2000.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from cp_support import DIALECTS
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from proof_support import SPEAKERS, drive, finish_scripts, make_workspace, workspace_problems

from runfold.api import Workspace

HERE = Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("RUNFOLD_PROOF_EXAMPLES", "120"))
KILLED = max(16, EXAMPLES // 8)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    waves = draw(st.lists(st.integers(1, 3), min_size=3, max_size=8))
    return {
        "dialect": draw(st.sampled_from(DIALECTS)),
        "window": draw(st.sampled_from((3000, 4000, 6000))),
        "waves": waves,
        "big": draw(st.lists(st.sampled_from((True, True, False)), min_size=sum(waves), max_size=sum(waves))),
        "steers": sorted(
            draw(
                st.dictionaries(st.integers(1, 70), st.sampled_from(SPEAKERS), max_size=4)
            ).items()
        ),
        "talk": draw(st.integers(0, 300)),
        "fork_at": draw(st.floats(0, 1)),
    }


def check_workspace(root: Path, sc: dict[str, Any], runs: int) -> None:
    ws = Workspace.open(root)
    try:
        ws.verify()
        assert len(ws.runs()) == runs
        for run in ws.runs():
            report = ws.replay(run)
            assert report.ok, report.summary()
        problems = workspace_problems(ws, sc["window"])
        assert not problems, problems[:10]
    finally:
        ws.close()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_request_of_random_runs_is_valid_budgeted_exact_and_attributed(sc: dict[str, Any]) -> None:
    tmp = Path(tempfile.mkdtemp())
    try:
        root = tmp / "ws"
        make_workspace(root, sc)
        out, _ = asyncio.run(drive(root, sc))
        assert out.completion == "done", out.reason
        ws = Workspace.open(root)
        lines = ws.records(run=out.run_id)
        event(f"compactions: {sum(1 for r in lines if r.kind_name == 'context_changed')}")
        for rec in lines:  # a fork at every seq would inherit a cut valid in every dialect
            view = ws.request_at(out.run_id, rec.seq)
            assert all(v == [] for v in view.verdicts.values()), (rec.seq, view.verdicts)
        at = lines[min(len(lines) - 1, int(sc["fork_at"] * len(lines)))].seq
        forked = ws.run("go on from there", fork=(out.run_id, at), model=finish_scripts(sc), builtin_tools=["read_file"])
        ws.close()
        assert forked.completion == "done", forked.reason
        check_workspace(root, sc, runs=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    return env


def _run_and_kill(root: Path, sc: dict[str, Any], after: int, delay: float) -> bool:
    """Drive `sc` in a child process, SIGKILL it `delay` s after it wrote its `after`-th line;
    True when it was killed (it may finish first)."""
    import json

    proc = subprocess.Popen(
        [sys.executable, str(HERE / "proof_support.py"), str(root), json.dumps(sc)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_child_env(),
    )
    assert proc.stdout is not None
    timer: threading.Timer | None = None
    seen = 0
    try:
        while proc.stdout.readline():
            seen += 1
            if seen == after and timer is None:
                timer = threading.Timer(delay, proc.send_signal, (signal.SIGKILL,))
                timer.start()
        proc.wait(timeout=120)
    finally:
        if timer is not None:
            timer.cancel()
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    return proc.returncode == -signal.SIGKILL


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@settings(max_examples=KILLED, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(1, 45), st.sampled_from((0.0, 0.002, 0.02)))
def test_every_request_is_valid_and_attributed_across_kills_and_resumes(
    sc: dict[str, Any], after: int, delay: float
) -> None:
    tmp = Path(tempfile.mkdtemp())
    try:
        root = tmp / "ws"
        make_workspace(root, sc)
        killed = _run_and_kill(root, sc, after, delay)
        event(f"killed: {killed}")
        res = subprocess.run(
            [sys.executable, "-m", "runfold", "resume", "--json", "-w", str(root)],
            capture_output=True,
            text=True,
            env=_child_env(),
            check=False,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        ws = Workspace.open(root)
        runs = ws.runs()
        if runs and killed:
            status = ws.records(run=runs[0])[-1].env.data.get("completion")
            if status != "done":
                out = ws.continue_run(runs[0], model=finish_scripts(sc), builtin_tools=["read_file"])
                assert out.completion == "done", out.reason
        total = len(ws.runs())
        ws.close()
        check_workspace(root, sc, runs=total)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
