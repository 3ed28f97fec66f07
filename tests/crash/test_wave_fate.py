"""What survives a cancel, a SIGTERM, a SIGHUP or a SIGKILL in the middle of a parallel wave.

Real `runfold run` processes run a reply with three `exec` calls and are stopped while the
second runs. The wave is completed, never dropped: the first call keeps its result, the second
is `E_TOOL_OUTCOME_UNKNOWN`, the third is answered "not started"; a successor's first request
carries all three, and its runtime note names the unknown and the never-started call. SIGTERM
and SIGHUP are handled as Ctrl-C is (exit 6, `cancel_received`, the run frozen) and no child of
`exec` outlives runfold, not even after a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from crash_support import cli, history_problems, rendered_requests

from runfold.api import Workspace
from runfold.providers.scripted import ScriptedProvider

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


WAVE = {
    "content": [
        {"kind": "text", "text": "three commands"},
        _use("x1", "exec", {"command": "echo one > one.txt"}),
        _use("x2", "exec", {"command": "sleep 1.5 && echo late > late.txt"}),
        _use("x3", "exec", {"command": "echo three > three.txt"}),
    ]
}


def _start(root: Path, script: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    return subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "three commands", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _stopped_mid_wave(tmp_path: Path, how: signal.Signals) -> tuple[Path, str, int]:
    """Run WAVE in a real process; send `how` while the second call runs. Returns the
    workspace root, the run and the exit code."""
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps(WAVE) + "\n" + json.dumps({"content": [{"kind": "text", "text": "never"}]}) + "\n")
    proc = _start(root, script)
    assert proc.stdout is not None
    run = ""
    for raw in proc.stdout:
        event = json.loads(raw)
        run = event["run"]
        if event["kind"] == "tool_called" and (root / "one.txt").exists():
            break  # the second call's tool_called is durable: it runs now
    time.sleep(0.3)
    os.kill(proc.pid, how)
    proc.communicate(timeout=30)
    return root, run, proc.returncode


def _successor(root: Path, run: str) -> tuple[Workspace, str]:
    ws = Workspace.open(root)

    async def main() -> str:
        out = await ws.arun("", continues=run, model=ScriptedProvider.of([{"content": [{"kind": "text", "text": "ok"}]}]))
        assert out.completion == "done", out.reason
        return out.run_id

    return ws, asyncio.run(main())


def _check_fates(root: Path, run: str) -> None:
    time.sleep(1.6)  # the second command would have written late.txt by now
    assert not (root / "late.txt").exists(), "an exec child outlived the run"
    assert not (root / "three.txt").exists()
    ws, successor = _successor(root, run)
    results = {r.env.data["tool_use_id"]: r.env.data for r in ws.records(run=run, kind="tool_result")}
    assert results["x1"].get("result", {}).get("exit_code") == 0
    assert results["x2"]["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert "not started" in results["x3"]["error"]["action"]
    first = rendered_requests(ws, successor)[0].bodies["anthropic"]
    blocks = [b for m in first["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    answered = {b["tool_use_id"]: b for b in blocks if b.get("type") == "tool_result"}
    assert set(answered) == {"x1", "x2", "x3"}, "the successor does not see every call of the wave"
    assert "exit_code" in json.dumps(answered["x1"]) and not answered["x1"].get("is_error")
    (note,) = [r.env.data["text"] for r in ws.records(run=successor, kind="steer_received")]
    assert "`exec` (call x2)" in note and "outcome is unknown" in note
    assert "`exec` (call x3)" in note and "never started" in note
    assert not history_problems(ws)
    assert ws.replay(successor).ok


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_wave_completes_the_wave_and_freezes_the_run(tmp_path: Path, how: signal.Signals) -> None:
    root, run, code = _stopped_mid_wave(tmp_path, how)
    assert code == 6, f"{how.name}: exit {code}"
    ws = Workspace.open(root)
    kinds = [r.kind_name for r in ws.records(run=run)]
    assert kinds[-3:] == ["cancel_received", "handoff_written", "run_frozen"]
    _check_fates(root, run)


def test_a_sigkill_mid_wave_then_resume_completes_the_wave(tmp_path: Path) -> None:
    root, run, code = _stopped_mid_wave(tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    res = cli("resume", "--json", "-w", root, cwd=root)
    assert res.code == 0, res.out + res.err
    ws = Workspace.open(root)
    assert ws.records(run=run)[-1].env.data == {"completion": "cancelled", "cause": "process_died"}
    _check_fates(root, run)
