"""Ctrl-C on a real `runfold run` process: the run is cancelled at the next safe point.

SIGINT is sent to a `python -m runfold run` subprocess while its scripted model is slow to
answer (or while a tool runs); the process must exit with the cancelled code (6), and the
ledger must verify, end the run with `cancel_received`, `handoff_written`, `run_frozen
{completion: cancelled}`, and fold into a valid conversation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runfold.api import Workspace

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def start_run(root: Path, script: list[dict[str, object]]) -> subprocess.Popen[str]:
    path = root.parent / "slow.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in script), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env["NO_COLOR"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "wait for it", "--model", f"script:{path}", "-w", str(root)],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(root: Path, needle: str, proc: subprocess.Popen[str]) -> None:
    """Poll the ledger until a flushed line contains `needle` (the process is then mid-run)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for seg in (root / ".runfold" / "ledger").glob("ledger-*.jsonl"):
            if needle in seg.read_text(encoding="utf-8"):
                return
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the run never wrote {needle}")


def check_cancelled(root: Path, proc: subprocess.Popen[str]) -> list[str]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 6, out + err
    assert "Ctrl-C: cancelling: stopping what is in flight" in out
    assert "cancelled:" in out and "Traceback" not in out + err
    ws = Workspace.open(root)
    assert ws.verify().lines >= 1
    run = ws.runs()[-1]
    lines = ws.records(run=run)
    kinds = [r.kind_name for r in lines]
    assert kinds[-3:] == ["cancel_received", "handoff_written", "run_frozen"]
    assert lines[-1].env.data["completion"] == "cancelled"
    ws.fold(run)  # the history folds into a valid conversation
    return kinds


def test_sigint_while_the_model_thinks(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root)
    proc = start_run(root, [{"content": [{"kind": "text", "text": "late"}], "delay_ms": 60_000}])
    wait_for_line(root, '"kind":"model_called"', proc)
    proc.send_signal(signal.SIGINT)
    kinds = check_cancelled(root, proc)
    assert "model_returned" not in kinds


def test_sigint_during_a_tool(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root)
    call = {"kind": "tool_use", "id": "x1", "name": "exec", "input": json.dumps({"command": "sleep 60"})}
    proc = start_run(root, [{"content": [call]}, {"content": [{"kind": "text", "text": "never"}]}])
    wait_for_line(root, '"kind":"tool_called"', proc)
    proc.send_signal(signal.SIGINT)
    kinds = check_cancelled(root, proc)
    assert kinds.count("model_called") == 1
    replay = subprocess.run(
        [sys.executable, "-m", "runfold", "replay", "-w", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert replay.returncode == 0 and "1/1 requests byte-exact" in replay.stdout


def test_three_quick_sigints_still_freeze_a_valid_cancelled_run(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root)
    proc = start_run(root, [{"content": [{"kind": "text", "text": "late"}], "delay_ms": 60_000}])
    wait_for_line(root, '"kind":"model_called"', proc)
    for _ in range(3):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.01)
    check_cancelled(root, proc)
