"""`runfold resume` and `runfold continue` end to end: a real `runfold run` process is
killed with SIGKILL while a tool of a parallel wave runs; resume closes the call and freezes the
run; continue dispatches a successor whose requests replay byte-exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_support import run_cli

from runfold.api import Workspace

WAVE = {
    "content": [
        {"kind": "text", "text": "two at once"},
        {"kind": "tool_use", "id": "a1", "name": "write_file", "input": '{"path":"x.txt","content":"hi"}'},
        {"kind": "tool_use", "id": "a2", "name": "exec", "input": '{"command":"sleep 60"}'},
    ]
}


def _script(path: Path, *entries: dict[str, object]) -> str:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return f"script:{path}"


def _killed_mid_wave(ws: Path) -> str:
    """Start `runfold run` in its own process group, wait until the exec call is durable, then
    SIGKILL the whole group. Returns the run id."""
    spec = _script(ws / "s.jsonl", WAVE, {"content": [{"kind": "text", "text": "done"}]})
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "write and wait", "--model", spec],
        cwd=ws,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ids = [r.env.data.get("id") for r in Workspace.open(ws).records(kind="tool_called")]
            if "a2" in ids:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the run never called the exec tool")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return Workspace.open(ws).runs()[0]


def test_kill_mid_wave_then_resume_and_continue(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert run_cli("init", "-w", ws, cwd=tmp_path).code == 0
    run = _killed_mid_wave(ws)

    shown = run_cli("resume", cwd=ws)
    assert shown.code == 0, shown.err
    assert "closed 1 tool call(s)" in shown.out and "exec" in shown.out
    assert "froze 1 run(s)" in shown.out and f"runfold continue {run[:8]}" in shown.out

    again = run_cli("resume", "--json", cwd=ws)
    data = json.loads(again.out)
    assert again.code == 0 and data["written"] == [] and data["closed"] == [] and data["frozen"] == []
    assert [w["run"] for w in data["waiting"]] == [run]
    assert data["waiting"][0]["cause"] == "process_died"

    spec = _script(ws / "s2.jsonl", {"content": [{"kind": "text", "text": "checked x.txt; done"}]})
    out = run_cli(
        "continue", run[:13], "--task", "make sure x.txt says hi", "--model", spec, "--json", cwd=ws
    )
    assert out.code == 0, out.err
    successor = json.loads(out.out)["run"]
    assert run_cli("replay", successor, cwd=ws).code == 0
    assert run_cli("verify", cwd=ws).code == 0
    first = Workspace.open(ws).records(run=successor)[0]
    assert first.env.data["predecessor"] == run and "make sure x.txt" in first.env.data["task"]
    waiting = json.loads(run_cli("resume", "--json", cwd=ws).out)["waiting"]
    assert waiting == [], "a continued run is no longer waiting"


def test_continue_refuses_unknown_runs_and_bad_ceilings(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    run_cli("init", "-w", ws, cwd=tmp_path)
    unknown = run_cli("continue", "0190ffff", cwd=ws)
    assert unknown.code == 2 or unknown.code == 3
    assert "E_INVALID_ARGS" in unknown.err
    bad = run_cli("continue", "0190ffff", "--max-turns", "0", cwd=ws)
    assert bad.code in (2, 3) and "at least 1" in bad.err


def test_resume_suggests_prefixes_that_resolve(tmp_path: Path) -> None:
    """Runs started together share their first 8 characters: every `runfold continue X` that
    resume suggests must name exactly one run, now and after later runs (found by a person
    following it): the suggestion gives the whole id."""
    from runfold.providers.scripted import ScriptedProvider

    ws = tmp_path / "ws"
    run_cli("init", "-w", ws, cwd=tmp_path)
    w = Workspace.open(ws)
    reply = {"content": [{"kind": "tool_use", "id": "c1", "name": "list_dir", "input": "{}"}]}
    for task in ("one", "two", "three"):
        assert w.run(task, model=ScriptedProvider.of([reply]), max_turns=1).completion == "limit"
    out = run_cli("resume", cwd=ws).out
    suggested = [line.split()[2] for line in out.splitlines() if line.strip().startswith("runfold continue")]
    assert len(suggested) == 3
    assert sorted(Workspace.open(ws).resolve_run(p) for p in suggested) == sorted(w.runs())
    assert sorted(suggested) == sorted(w.runs())


def test_usage_errors_answer_in_json_when_asked(tmp_path: Path) -> None:
    """`--json` promises one JSON document on stdout, errors too — also for a usage error that
    click raises before the command runs (found by a first-time user)."""
    for argv in (("runs", "--json", "--bogus"), ("steer", "01a2", "--json")):
        r = run_cli(*argv, cwd=tmp_path)
        assert r.code == 2
        data = json.loads(r.out)
        assert data["ok"] is False and data["error"]["code"] == "E_INVALID_ARGS"
        assert f"runfold {argv[0]} --help" in data["error"]["recovery"]
    plain = run_cli("runs", "--bogus", cwd=tmp_path)
    assert plain.code == 2 and plain.out == "" and "No such option" in plain.err
