"""A dispatch past `--max-runs` is checked as one under it: a bad model SPEC, an unknown tool
name or a turn ceiling no ledger line can hold is refused (4xx, runfold's error shape) before it
is queued, never taken (202) and refused later, nor answered 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from srv_support import Server, make_workspace, start_server, ten_turns, wait_state

from runfold.store.serving import queue_dir


@pytest.fixture
def full(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    """A server at `--max-runs 1` whose one place is taken by a slow run."""
    srv = start_server(make_workspace(tmp_path / "ws"), "--max-runs", "1")
    slow = ten_turns(tmp_path / "slow.jsonl", delay_ms=500)
    with srv.client() as c:
        run = c.post("/runs", json={"task": "hold the place", "model": f"script:{slow}"}).json()["run"]
    yield srv, run
    srv.stop()


BAD = [
    pytest.param({"model": "nosuch:model"}, "E_INVALID_ARGS", id="model"),
    pytest.param({"builtin_tools": ["rm_rf"]}, "E_TOOL_UNKNOWN", id="tool"),
    pytest.param({"max_turns": 10**30}, "E_INVALID_ARGS", id="max_turns"),
]


@pytest.mark.parametrize(("extra", "code"), BAD)
def test_a_bad_dispatch_past_the_limit_is_refused_before_it_is_queued(
    full: tuple[Server, str], extra: dict[str, object], code: str
) -> None:
    srv, running = full
    with srv.client() as c:
        resp = c.post("/runs", json={"task": "x", **extra})
        assert 400 <= resp.status_code < 500, resp.text
        body = resp.json()
        assert body["error"]["code"] == code and body["error"]["recovery"], body
        assert c.get("/server").json()["queued"] == 0
        assert [r["run"] for r in c.get("/runs").json()["runs"]] == [running]
        c.post(f"/runs/{running}/cancel", json={})
        wait_state(c, running, ("cancelled", "done"))
    assert srv.proc.poll() is None
    assert not list(queue_dir(srv.root).glob("*.json"))


def test_a_turn_ceiling_past_the_ledgers_integers_is_a_schema_error(tmp_path: Path) -> None:
    srv = start_server(make_workspace(tmp_path / "ws"))
    try:
        with srv.client() as c:
            resp = c.post("/runs", json={"task": "x", "max_turns": 2**64})
            assert resp.status_code == 422 and resp.json()["error"]["subject"] == "body.max_turns", resp.text
            assert c.get("/runs").json()["runs"] == []
    finally:
        srv.stop()


def test_a_prefix_shared_by_a_running_and_a_queued_run_names_both(full: tuple[Server, str], tmp_path: Path) -> None:
    """Run ids begin with their time, so runs dispatched together share a start: a prefix that
    fits the running run and a queued one is refused naming both, never taken as the running one
    (a cancel meant for the queued run would end the running one)."""
    srv, running = full
    with srv.client() as c:
        queued = c.post("/runs", json={"task": "wait", "model": f"script:{tmp_path / 'slow.jsonl'}"}).json()
        assert queued["state"] == "queued"
        shared = next(i for i, (a, b) in enumerate(zip(running, queued["run"], strict=True)) if a != b)
        prefix = running[:shared]
        for resp in (c.get(f"/runs/{prefix}"), c.post(f"/runs/{prefix}/cancel", json={})):
            assert resp.status_code == 400, resp.text
            assert set(resp.json()["error"]["nearby"]) == {running, queued["run"]}
        assert c.get(f"/runs/{running}").json()["run"]["state"] == "running"
        assert c.get(f"/runs/{queued['run']}").json()["run"]["state"] == "queued"
        for run in (queued["run"], running):
            c.post(f"/runs/{run}/cancel", json={})
