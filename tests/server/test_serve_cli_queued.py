"""A run the CLI hands to a full `runfold serve` waits in its queue in plain sight: `runfold run`
says it is queued and why, `runfold runs` lists it, `steer` names its state, `cancel` (or Ctrl-C
in the waiting `runfold run`) drops it, and the command ends as a cancelled run that never
started — no line written, no next steps for a run that does not exist."""

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
def full(tmp_path: Path):
    """A server with one place, taken by a slow run; yields (server, slow script)."""
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root, "--max-runs", "1")
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=30_000)  # holds the one place for the whole test
    with srv.client() as c:
        busy = c.post("/runs", json={"task": "busy", "model": f"script:{slow}"}).json()["run"]
        wait_state(c, busy, ("running",))
    yield srv, slow
    with srv.client() as c:
        c.post(f"/runs/{busy}/cancel", json={})
    srv.stop()


def queued_run(srv: Server, task: str, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with srv.client() as c:
            for r in c.get("/runs").json()["runs"]:
                if r["task"] == task and r["state"] == "queued":
                    return str(r["run"])
        time.sleep(0.1)
    raise AssertionError("the run never showed as queued")


def start_run(srv: Server, task: str, script: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", task, "--model", f"script:{script}", "-w", str(srv.root)],
        cwd=srv.root, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_queued_run_is_listed_steer_names_its_state_and_cancel_drops_it(full: tuple[Server, Path]) -> None:
    srv, slow = full
    proc = start_run(srv, "waits its turn", slow)
    run = queued_run(srv, "waits its turn", proc)
    listed = cli(srv.root, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {"run": run, "status": "queued", "task": "waits its turn"} in json.loads(listed.stdout)
    table = cli(srv.root, "runs")
    assert any(line.split()[1:2] == ["queued"] and line.endswith("waits its turn") for line in table.stdout.splitlines())
    steer = cli(srv.root, "steer", run[:13], "hurry")
    assert steer.returncode != 0 and "(it is queued: it has not started) on run " in steer.stderr and "`runfold runs`" in steer.stderr
    cancel = cli(srv.root, "cancel", run[:13])
    assert cancel.returncode == 0, cancel.stderr
    assert f"run {run} was queued on the server and is dropped: it never started" in cancel.stdout
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 6, out + err
    assert f"run {run} is queued: the server runs 1 of at most 1 at once" in out
    assert "dropped from the server's queue before it started: the ledger has no line of it" in err
    assert "runfold log --run" not in out + err  # no next steps for a run with no line
    lines = srv.root.joinpath(".runfold", "ledger")
    assert run not in "".join(p.read_text() for p in lines.glob("*.jsonl"))


def test_ctrl_c_while_queued_drops_the_run(full: tuple[Server, Path]) -> None:
    srv, slow = full
    proc = start_run(srv, "changes its mind", slow)
    run = queued_run(srv, "changes its mind", proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 6, out + err
    assert "dropped from the server's queue before it started" in err
    with srv.client() as c:
        assert c.get(f"/runs/{run}").json()["run"]["state"] == "dropped"


def test_a_run_left_queued_by_a_stopped_server_is_listed_and_can_be_dropped_before_the_next(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root, "--max-runs", "1")
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=30_000)
    try:
        with srv.client() as c:
            busy = c.post("/runs", json={"task": "busy", "model": f"script:{slow}"}).json()["run"]
            wait_state(c, busy, ("running",))
            waiting = c.post("/runs", json={"task": "left waiting", "model": f"script:{slow}"}).json()
            assert waiting["state"] == "queued"
    finally:
        srv.stop()  # SIGTERM: the running run is frozen, the queued one stays queued for the next server
    run = str(waiting["run"])
    listed = cli(root, "runs", "--json")
    assert {"run": run, "task": "left waiting", "status": "queued for the next serve"} in json.loads(listed.stdout)
    steer = cli(root, "steer", run, "hello")
    assert steer.returncode == 2 and "waits in the queue for the next `runfold serve`" in steer.stderr
    dropped = cli(root, "cancel", run[:18])
    assert dropped.returncode == 0, dropped.stderr
    assert f"run {run} waited in the queue for the next `runfold serve` and is dropped: it will not start" in dropped.stdout
    assert run not in cli(root, "runs", "--json").stdout
    again = start_server(root)
    try:
        with again.client() as c:
            assert run not in {r["run"] for r in c.get("/runs").json()["runs"]}  # the next server never starts it
    finally:
        log = again.stop()
    assert "queued again" not in log


def test_a_prefix_shared_by_a_running_and_a_queued_run_is_refused_as_ambiguous(full: tuple[Server, Path]) -> None:
    # run ids start with their time: a run queued now shares its first characters with the one
    # running; `cancel`/`steer` with that prefix must not pick the ledger's run because the
    # queued one has no line yet
    srv, slow = full
    with srv.client() as c:
        queued = c.post("/runs", json={"task": "later", "model": f"script:{slow}"}).json()
        assert queued["state"] == "queued"
        (running,) = [r["run"] for r in c.get("/runs").json()["runs"] if r["state"] == "running"]
    shared = 0
    while running[shared] == queued["run"][shared]:
        shared += 1
    prefix = running[:shared]
    for args in (("cancel", prefix), ("steer", prefix, "stop here")):
        res = cli(srv.root, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "E_INVALID_ARGS" in res.stderr and running in res.stderr and queued["run"] in res.stderr, res.stderr
    with srv.client() as c:
        assert c.get(f"/runs/{running}").json()["run"]["state"] == "running"
        assert c.get(f"/runs/{queued['run']}").json()["run"]["state"] == "queued"
        lines = c.get(f"/runs/{running}", params={"lines": True}).json()["lines"]
    assert not [x for x in lines if x["kind"] in ("steer_received", "cancel_received")]
