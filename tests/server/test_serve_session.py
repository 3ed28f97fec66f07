"""A run dispatched to `runfold serve` may open a session (a chat's first turn): `session`
becomes its `session_opened` line; a session naming a run that is no run id is refused (400) and
writes nothing."""

from __future__ import annotations

from pathlib import Path

from srv_support import make_workspace, start_server, wait_state, write_script

from runfold.api import Workspace


def test_a_dispatch_with_a_session_writes_session_opened_and_a_bad_one_nothing(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    answer = write_script(tmp_path / "a.jsonl", [{"content": [{"kind": "text", "text": "ok"}]}])
    srv = start_server(root)
    try:
        with srv.client() as c:
            first = c.post("/runs", json={"task": "t", "model": f"script:{answer}", "session": {"carried": False}})
            assert first.status_code == 202, first.text
            run = first.json()["run"]
            wait_state(c, run, ("done",))
            last = c.get(f"/runs/{run}", params={"lines": True}).json()["lines"][-1]["seq"]
            nxt = c.post(
                f"/runs/{run}/continue",
                json={"task": "go on", "model": f"script:{answer}", "session": {"carried": True, "run": run, "at_seq": last}},
            )
            assert nxt.status_code == 202, nxt.text
            wait_state(c, nxt.json()["run"], ("done",))
            head = c.get("/server").json()["next_seq"]
            bad = c.post("/runs", json={"task": "t", "session": {"carried": True, "run": "nope", "at_seq": 1}})
            assert bad.status_code == 400 and bad.json()["error"]["subject"].startswith("session run 'nope'")
            half = c.post("/runs", json={"task": "t", "session": {"carried": True, "run": run}})
            assert half.status_code == 400
            assert c.get("/server").json()["next_seq"] == head
    finally:
        srv.stop()
    with Workspace.open(root) as ws:
        opened = [r for r in ws.records() if r.env.kind == "session_opened"]
    assert [(r.env.run, r.env.data) for r in opened] == [
        (run, {"carried": False}),
        (nxt.json()["run"], {"carried": True, "from": {"run": run, "at_seq": last}}),
    ]
