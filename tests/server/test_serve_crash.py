"""kill -9 of the server while runs run and wait in its queue, then a restart: every lost run is
frozen `process_died` by resume, an acknowledged steer is recorded exactly once, a queued
dispatch runs exactly once, the lines the event stream delivered are still there, byte for byte."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

from srv_support import make_workspace, start_server, ten_turns, wait_state

from runfold.api import Workspace


def test_kill_9_mid_runs_then_restart(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=700)
    srv = start_server(root, "--max-runs", "3")
    with srv.client() as c:
        runs = [c.post("/runs", json={"task": f"job {i}", "model": f"script:{slow}"}).json() for i in range(6)]
        assert [r["state"] for r in runs] == ["running"] * 3 + ["queued"] * 3
        target = runs[0]["run"]
        ack = c.post(f"/runs/{target}/steer", json={"text": "remember d8"})
        assert ack.status_code == 202 and ack.json()["state"] == "accepted"
        signal_id = ack.json()["signal"]
        seen: list[dict] = []
        with c.stream("GET", f"/runs/{runs[1]['run']}/events") as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {\"v\""):
                    seen.append(json.loads(line[6:]))
                if len(seen) >= 6:
                    break
    srv.stop(signal.SIGKILL)

    srv = start_server(root, "--max-runs", "3")
    try:
        with srv.client() as c:
            for r in runs[:3]:
                info = wait_state(c, r["run"], ("cancelled",))
                assert info["cause"] == "process_died"
            for r in runs[3:]:
                assert wait_state(c, r["run"], ("done",), timeout=180)["turns"] == 10
    finally:
        srv.stop()
    with Workspace.open(root) as ws:
        ws.verify()
        lines = ws.records()
        started = Counter(rec.env.run for rec in lines if rec.env.kind == "run_started")
        assert all(started[r["run"]] == 1 for r in runs)  # nothing ran twice
        steered = [rec for rec in lines if rec.env.kind == "steer_received" and rec.env.data.get("signal") == signal_id]
        assert len(steered) == 1 and steered[0].env.run == target
        by_seq = {rec.seq: json.loads(rec.raw) for rec in lines}
        assert all(by_seq[line["seq"]] == line for line in seen)  # acknowledged lines survived
    assert not list((root / ".runfold" / "serve" / "queue").glob("*.json"))


def test_sigterm_freezes_running_runs_as_cancelled_and_keeps_the_queue(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=2000)
    quick = ten_turns(tmp_path / "quick.jsonl")
    srv = start_server(root, "--max-runs", "1")
    with srv.client() as c:
        running = c.post("/runs", json={"task": "slow", "model": f"script:{slow}"}).json()["run"]
        queued = c.post("/runs", json={"task": "later", "model": f"script:{quick}"}).json()
        assert queued["state"] == "queued"
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=120) == 0
    assert not (root / ".runfold" / "serve" / "serve.json").exists()
    with Workspace.open(root) as ws:
        status = {s.run: (s.status, s.cause) for s in ws.run_summaries()}
    assert status[running] == ("cancelled", None)  # frozen by the stop, not by a resume
    assert queued["run"] not in status
    srv = start_server(root)
    try:
        with srv.client() as c:
            assert wait_state(c, queued["run"], ("done",), timeout=120)["turns"] == 10
    finally:
        srv.stop()


def test_sigterm_ends_open_event_streams_with_the_runs_last_line(tmp_path: Path) -> None:
    """A client streaming a running run's events when the server is stopped receives the run's
    `run_frozen` (cancelled) and the `end` event, and one streaming a queued run the `end` event:
    no stream is cut mid-body after the shutdown's grace, nor does the log show a traceback."""
    import threading

    from srv_support import sse_events

    root = make_workspace(tmp_path / "ws")
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=2000)
    srv = start_server(root, "--max-runs", "1")
    with srv.client() as c:
        running = c.post("/runs", json={"task": "slow", "model": f"script:{slow}"}).json()["run"]
        queued = c.post("/runs", json={"task": "later", "model": f"script:{slow}"}).json()["run"]
    got: dict[str, list[dict[str, str]]] = {running: [], queued: []}
    failed: list[str] = []

    def watch(run: str) -> None:
        with srv.client(timeout=120) as c:
            try:
                got[run].extend(sse_events(c, run))
            except Exception as exc:  # the stream was cut
                failed.append(f"{run}: {exc!r}")

    threads = [threading.Thread(target=watch, args=(r,), daemon=True) for r in (running, queued)]
    for t in threads:
        t.start()
    wait_state(srv.client(), running, ("running",))
    import time

    deadline = time.monotonic() + 60
    while not got[running] and time.monotonic() < deadline:
        time.sleep(0.05)
    err = srv.stop(signal.SIGTERM, timeout=120)
    for t in threads:
        t.join(timeout=60)
    assert srv.proc.returncode == 0 and not failed, failed
    assert "Traceback" not in err, err
    events = got[running]
    assert events[-1]["event"] == "end" and events[-2]["event"] == "run_frozen", events[-3:]
    assert json.loads(events[-2]["data"])["data"]["completion"] == "cancelled"
    assert [e["event"] for e in got[queued]] == ["end"]


def test_a_damaged_queued_dispatch_is_reported_and_the_server_starts(tmp_path: Path) -> None:
    # a queue file whose fork or session fields do not hold the shapes the server writes (edited
    # by hand, half restored from a backup) is dropped with a clear reason, as other damage is,
    # instead of stopping the server from starting with an internal error
    root = make_workspace(tmp_path / "ws")
    queue = root / ".runfold" / "serve" / "queue"
    queue.mkdir(parents=True)
    damaged = {
        "01a23af5-0000-7000-8000-000000000001": {"task": "x", "fork": {"run": "abc"}},
        "01a23af5-0000-7000-8000-000000000002": {"task": "x", "fork": {"run": "abc", "at": "zz"}},
        "01a23af5-0000-7000-8000-000000000003": {"task": "x", "fork": "abc"},
        "01a23af5-0000-7000-8000-000000000004": {
            "task": "x", "session": {"run": "01a23af5-0000-7000-8000-000000000009", "at_seq": "q"},
        },
    }  # fmt: skip
    for run, request in damaged.items():
        (queue / f"{run}.json").write_text(json.dumps(request))
    srv = start_server(root)
    try:
        with srv.client() as c:
            assert c.get("/runs").json()["runs"] == []
    finally:
        err = srv.stop()
    for run in damaged:
        assert f"queued run {run} not run again: E_INVALID_ARGS" in err, err
    assert not list(queue.glob("*.json"))
