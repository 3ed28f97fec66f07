"""Approval policies given on the command line travel with a run handed to `runfold serve`:
`--approve write=deny` denies the write in the served run, `--yes` allows what the config asks
for, and an `ask` call waits for `runfold approve` sent from another terminal."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from srv_support import Server, cli, env, make_workspace, start_server


def write_then_answer(path: Path) -> Path:
    call = {"kind": "tool_use", "id": "call_w", "name": "write_file", "input": json.dumps({"path": "plan.md", "content": "step 1\n"})}
    turns = [{"content": [call]}, {"content": [{"kind": "text", "text": "finished"}]}]
    path.write_text("".join(json.dumps(t) + "\n" for t in turns))
    return path


def run_lines(srv: Server, run: str) -> list[dict[str, Any]]:
    with srv.client() as c:
        lines: list[dict[str, Any]] = c.get(f"/runs/{run}", params={"lines": True}).json()["lines"]
    return lines


def test_approve_deny_given_to_run_is_applied_by_the_server(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root)
    try:
        script = write_then_answer(tmp_path / "w.jsonl")
        res = cli(root, "run", "write the plan", "--model", f"script:{script}", "--approve", "write=deny", "--json")
        assert res.returncode == 0, res.stderr
        run = json.loads(res.stdout)["run"]
        assert not (root / "plan.md").exists()
        lines = run_lines(srv, run)
        started = next(x for x in lines if x["kind"] == "run_started")
        assert started["data"]["policy"]["approvals"] == {"write": "deny"}
        assert [x["data"]["tool_use_id"] for x in lines if x["kind"] == "gate_denied"] == ["call_w"]
    finally:
        srv.stop()


def test_yes_overrides_a_config_that_asks(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    config = root / ".runfold" / "config.toml"
    config.write_text(config.read_text() + '\n[approvals]\nwrite = "ask"\n')
    srv = start_server(root)
    try:
        script = write_then_answer(tmp_path / "w.jsonl")
        res = cli(root, "run", "write the plan", "--model", f"script:{script}", "--yes", "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["answer"] == "finished"
        assert (root / "plan.md").read_text() == "step 1\n"
    finally:
        srv.stop()


def test_an_ask_in_a_served_run_waits_for_approve_from_another_terminal(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root)
    try:
        script = write_then_answer(tmp_path / "w.jsonl")
        proc = subprocess.Popen(
            [sys.executable, "-m", "runfold", "run", "write the plan", "--model", f"script:{script}",
             "--approve", "write=ask", "--json", "-w", str(root)],
            cwd=root, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 90
        run = None
        while run is None and time.monotonic() < deadline:
            with srv.client() as c:
                runs = c.get("/runs").json()["runs"]
            for r in runs:
                if any(x["kind"] == "approval_requested" for x in run_lines(srv, r["run"])):
                    run = r["run"]
            time.sleep(0.1)
        assert run is not None, "the served run never asked for approval"
        assert not (root / "plan.md").exists()
        ok = cli(root, "approve", run, "call_w", "--wait")
        assert ok.returncode == 0, ok.stderr
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert f"runfold approve {run} call_w" in err
        assert (root / "plan.md").read_text() == "step 1\n"
    finally:
        srv.stop()
