"""The CLI hands over to `runfold serve`: `run`, `continue`, `fork` and `steer` send their work to
the server that owns the workspace; Ctrl-C cancels only the run of that command; without a
server a second writer's refusal names `runfold serve`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from srv_support import Server, cli, env, make_workspace, start_server, ten_turns, wait_state


@pytest.fixture
def served(tmp_path: Path):
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root, "--max-runs", "4")
    yield srv
    srv.stop()


def test_run_continue_and_fork_are_handed_to_the_server(served: Server, tmp_path: Path) -> None:
    script = ten_turns(tmp_path / "ten.jsonl")
    res = cli(served.root, "run", "list the rooms", "--model", f"script:{script}", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["completion"] == "done" and out["turns"] == 10 and out["answer"] == "all done"
    run = out["run"]
    with served.client() as c:
        assert c.get(f"/runs/{run}").json()["run"]["state"] == "done"
    fork = cli(served.root, "fork", run, "--at", "10", "--json")
    assert fork.returncode == 0, fork.stderr
    assert json.loads(fork.stdout)["cut"] <= 10
    answer = tmp_path / "answer.jsonl"
    answer.write_text(json.dumps({"content": [{"kind": "text", "text": "went on"}]}) + "\n")
    succ = cli(served.root, "continue", run, "--task", "go on", "--model", f"script:{answer}", "--json")
    assert succ.returncode == 0, succ.stderr
    assert json.loads(succ.stdout)["answer"] == "went on"
    forked = cli(served.root, "fork", run, "--at", "20", "--run", "--model", f"script:{answer}", "--json")
    assert forked.returncode == 0, forked.stderr
    # every run is the server's: the ledger was written by one process only
    with served.client() as c:
        states = {r["run"]: r["state"] for r in c.get("/runs").json()["runs"]}
    assert json.loads(forked.stdout)["run"] in states and json.loads(succ.stdout)["run"] in states
    held = cli(served.root, "resume")
    assert held.returncode != 0 and "`runfold serve` (pid" in held.stderr


def test_steer_from_the_cli_reaches_a_run_the_server_hosts(served: Server, tmp_path: Path) -> None:
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=1500)
    with served.client() as c:
        run = c.post("/runs", json={"task": "t", "model": f"script:{slow}"}).json()["run"]
        res = cli(served.root, "steer", run, "check d8 twice", "--wait", "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["state"] == "recorded"
        wait_state(c, run, ("done",), timeout=120)
        lines = c.get(f"/runs/{run}", params={"lines": True}).json()["lines"]
        assert [x["data"]["text"] for x in lines if x["kind"] == "steer_received"] == ["check d8 twice"]


def test_ctrl_c_cancels_only_the_commands_run(served: Server, tmp_path: Path) -> None:
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=250)
    with served.client() as c:
        other = c.post("/runs", json={"task": "other", "model": f"script:{slow}"}).json()["run"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "runfold", "run", "mine", "--model", f"script:{slow}", "-w", str(served.root), "--json"],
            cwd=served.root, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        mine = None
        while mine is None and time.monotonic() < deadline:
            mine = next((r["run"] for r in c.get("/runs").json()["runs"] if r["task"] == "mine"), None)
            time.sleep(0.05)
        assert mine is not None
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 6, err
        assert json.loads(out)["completion"] == "cancelled"
        assert wait_state(c, mine, ("cancelled",))["state"] == "cancelled"
        assert wait_state(c, other, ("done",), timeout=120)["turns"] == 10


def test_a_second_plain_run_names_runfold_serve(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=3000)
    first = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "first", "--model", f"script:{slow}", "-w", str(root)],
        cwd=root, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        segment = next((root / ".runfold" / "ledger").glob("*.jsonl"))
        while time.monotonic() < deadline and "run_started" not in segment.read_text():
            time.sleep(0.05)
        second = cli(root, "run", "second", "--model", f"script:{slow}")
        assert second.returncode != 0
        assert "E_LEDGER_HELD" in second.stderr and "runfold serve" in second.stderr
        # a server cannot start beside it either, and is told to wait, not to start a server
        serve = cli(root, "serve", "--port", "0")
        assert serve.returncode == 3, serve.stderr
        assert serve.stderr.strip().endswith("wait for that process to finish (or stop it), then start `runfold serve` again")
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
