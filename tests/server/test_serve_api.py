"""`runfold serve` in a real process: dispatch, the event stream, queue, steer, cancel, fork,
continue, verify and runfold's error shape over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from srv_support import Server, make_workspace, sse_events, start_server, ten_turns, wait_state, write_script

from runfold.api import Workspace


@pytest.fixture
def served(tmp_path: Path):
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root, "--max-runs", "2")
    yield srv
    srv.stop()


def test_a_dispatched_run_streams_its_durable_lines_in_seq_order_and_replays(served: Server, tmp_path: Path) -> None:
    script = ten_turns(tmp_path / "ten.jsonl")
    with served.client() as c:
        resp = c.post("/runs", json={"task": "list the rooms", "model": f"script:{script}"})
        assert resp.status_code == 202, resp.text
        run = resp.json()["run"]
        assert resp.json()["state"] in ("running", "done")
        events = list(sse_events(c, run))
        assert events[-1]["event"] == "end"
        lines = [json.loads(e["data"]) for e in events[:-1]]
        seqs = [line["seq"] for line in lines]
        assert seqs == sorted(seqs) and [int(e["id"]) for e in events[:-1]] == seqs
        assert lines[0]["kind"] == "run_started" and lines[-1]["kind"] == "run_frozen"
        assert lines[-1]["data"]["completion"] == "done"
        assert {line["run"] for line in lines} == {run}
        # resumable: Last-Event-ID = the 5th line's seq gives the lines after it
        rest = list(sse_events(c, run, headers={"Last-Event-ID": str(seqs[4])}))
        assert [int(e["id"]) for e in rest[:-1]] == seqs[5:]
        detail = c.get(f"/runs/{run[:8]}", params={"lines": True}).json()
        assert detail["run"]["state"] == "done" and detail["run"]["turns"] == 10
        assert [line["seq"] for line in detail["lines"]] == seqs
        assert c.get("/verify").json()["ok"] is True
    with Workspace.open(served.root) as ws:  # a reader, while the server holds the writer
        report = ws.replay(run)
        assert report.ok and report.requests == 10


def test_a_stream_from_past_the_head_is_answered_at_once(served: Server, tmp_path: Path) -> None:
    script = ten_turns(tmp_path / "ten.jsonl")
    with served.client() as c:
        run = c.post("/runs", json={"task": "t", "model": f"script:{script}"}).json()["run"]
        wait_state(c, run, ("done",))
        head = c.get("/server").json()["next_seq"]
        resp = c.get(f"/runs/{run}/events", params={"since": head + 5})
        assert resp.status_code == 400
        body = resp.json()
        assert body["error"]["code"] == "E_INVALID_ARGS"
        assert f"the ledger's last line is seq {head - 1}" in body["error"]["recovery"]
        # from a seq after the frozen run's last line: the stream ends at once, never hangs
        events = list(sse_events(c, run, since=head))
        assert [e["event"] for e in events] == ["end"]


def test_runs_past_the_limit_are_queued_then_run(served: Server, tmp_path: Path) -> None:
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=150)
    with served.client() as c:
        runs = [c.post("/runs", json={"task": f"job {i}", "model": f"script:{slow}"}).json() for i in range(4)]
        assert [r["state"] for r in runs[:2]] == ["running", "running"]
        assert [r["state"] for r in runs[2:]] == ["queued", "queued"]
        listed = {r["run"]: r["state"] for r in c.get("/runs").json()["runs"]}
        assert listed[runs[3]["run"]] == "queued"
        for r in runs:
            assert wait_state(c, r["run"], ("done",), timeout=120)["turns"] == 10


def test_steer_reaches_a_running_run_once_and_names_the_state_otherwise(served: Server, tmp_path: Path) -> None:
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=300)
    with served.client() as c:
        run = c.post("/runs", json={"task": "t", "model": f"script:{slow}"}).json()["run"]
        ans = c.post(f"/runs/{run}/steer", json={"text": "also look at d8", "wait": True})
        assert ans.status_code == 202, ans.text
        assert ans.json()["state"] == "recorded"
        seq = ans.json()["seq"]
        wait_state(c, run, ("done",), timeout=120)
        lines = c.get(f"/runs/{run}", params={"lines": True}).json()["lines"]
        steers = [line for line in lines if line["kind"] == "steer_received"]
        assert [s["seq"] for s in steers] == [seq] and steers[0]["data"]["text"] == "also look at d8"
        frozen = c.post(f"/runs/{run}/steer", json={"text": "more"})
        assert frozen.status_code == 409
        assert "is frozen as done" in frozen.json()["message"]
        unknown = c.post("/runs/0000dead/steer", json={"text": "x"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "E_PATH_NOT_FOUND"
        empty = c.post(f"/runs/{run}/steer", json={"text": ""})
        assert empty.status_code == 422 and empty.json()["error"]["subject"] == "body.text"


def test_cancel_freezes_a_running_run_and_drops_a_queued_one(served: Server, tmp_path: Path) -> None:
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=400)
    with served.client() as c:
        runs = [c.post("/runs", json={"task": f"job {i}", "model": f"script:{slow}"}).json()["run"] for i in range(3)]
        queued = c.post(f"/runs/{runs[2]}/cancel", json={})
        assert queued.status_code == 202 and queued.json()["state"] == "dropped"
        ans = c.post(f"/runs/{runs[0]}/cancel", json={"wait": True})
        assert ans.status_code == 202 and ans.json()["state"] == "recorded"
        info = wait_state(c, runs[0], ("cancelled",))
        assert info["state"] == "cancelled"
        assert c.get(f"/runs/{runs[2]}").json()["run"]["state"] == "dropped"
        c.post(f"/runs/{runs[1]}/cancel", json={})
        wait_state(c, runs[1], ("cancelled",))


def test_fork_and_continue(served: Server, tmp_path: Path) -> None:
    script = ten_turns(tmp_path / "ten.jsonl")
    answer = write_script(tmp_path / "answer.jsonl", [{"content": [{"kind": "text", "text": "forked answer"}]}])
    with served.client() as c:
        run = c.post("/runs", json={"task": "t", "model": f"script:{script}"}).json()["run"]
        wait_state(c, run, ("done",))
        lines = c.get(f"/runs/{run}", params={"lines": True}).json()["lines"]
        at = next(line["seq"] for line in lines if line["kind"] == "tool_result")
        plain = c.post(f"/runs/{run}/fork", json={"at": at})
        assert plain.status_code == 201, plain.text
        assert plain.json()["state"] == "not_started" and plain.json()["cut"] <= at
        started = c.post(f"/runs/{run}/fork", json={"at": at, "start": True, "model": f"script:{answer}"})
        assert started.status_code == 201, started.text
        child = started.json()["run"]
        assert wait_state(c, child, ("done",))["forked_from"] == run
        succ = c.post(f"/runs/{plain.json()['run']}/continue", json={"task": "go on", "model": f"script:{answer}"})
        assert succ.status_code == 202, succ.text
        assert wait_state(c, succ.json()["run"], ("done",))["predecessor"] == plain.json()["run"]
        past = c.post(f"/runs/{run}/fork", json={"at": 10**9})
        assert past.status_code == 400 and "tail" in past.json()["message"]


def test_bad_requests_change_nothing(served: Server) -> None:
    with served.client() as c:
        before = c.get("/server").json()["next_seq"]
        for resp in (
            c.post("/runs", json={"task": "x", "max_turns": 0}),
            c.post("/runs", json={"task": "x", "unknown": 1}),
            c.post("/runs", content=b"{not json", headers={"content-type": "application/json"}),
            c.post("/runs", json={"task": "x", "model": "nosuch:model"}),
            c.post("/runs", json={"task": "x", "room": "../out"}),
        ):
            assert 400 <= resp.status_code < 500, resp.text
            body = resp.json()
            assert set(body["error"]) >= {"code", "action", "subject", "recovery"} and body["error"]["recovery"]
        assert c.get("/server").json()["next_seq"] == before
        assert c.get("/runs").json()["runs"] == []


def test_reads_from_many_clients_while_runs_write_never_disturb_the_writer(served: Server, tmp_path: Path) -> None:
    """Regression: `GET /runs`, `/runs/RUN` and `/server` were plain `def` routes, run in worker
    threads against the owner's writer while its runs appended; the two threads rebuilt the index
    together (`E_STORAGE_FATAL`, or a segfault in sqlite). Six clients read without pause while
    two runs write; the server must answer every read and stay up."""
    import threading

    scripts = [ten_turns(tmp_path / f"t{i}.jsonl") for i in range(4)]
    failures: list[str] = []
    stop = threading.Event()
    with served.client() as c:
        runs = [c.post("/runs", json={"task": "t", "model": f"script:{s}"}).json()["run"] for s in scripts]

        def read(path: str, params: dict[str, bool]) -> None:
            with served.client() as reader:
                while not stop.is_set():
                    try:
                        resp = reader.get(path, params=params)
                    except Exception as exc:  # the server dropped the connection (it died)
                        failures.append(f"{path}: {exc!r}")
                        return
                    if resp.status_code != 200:
                        failures.append(f"{path}: {resp.status_code} {resp.text[:300]}")
                        return

        paths = [("/runs", {}), ("/server", {})] + [(f"/runs/{r}", {"lines": True}) for r in runs]
        threads = [threading.Thread(target=read, args=p) for p in paths]
        for t in threads:
            t.start()
        try:
            for r in runs:
                wait_state(c, r, ("done",), timeout=120)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert failures == []
        assert served.proc.poll() is None
        assert c.get("/verify").json()["ok"] is True


def test_the_printed_api_address_leads_to_the_docs(served: Server) -> None:
    with httpx.Client(base_url=served.url, timeout=60) as c:
        for path in ("/api", "/api/"):
            got = c.get(path)
            assert got.status_code == 307 and got.headers["location"] == "/api/docs", (path, got.text)
        assert c.get("/api", follow_redirects=True).status_code == 200
