"""`runfold serve` refuses what it should not take, the same way whichever way it comes: a seq
given as `?since=` or as `Last-Event-ID` is parsed by one validator (422 for a negative or
non-numeric one), and a request body past the server's ceiling is answered 413 in runfold's
error shape before anything is dispatched or written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from srv_support import Server, make_workspace, start_server, wait_state, write_script

from runfold.api import Workspace


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root, "--max-body", "4096")
    yield srv
    srv.stop()


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(make_workspace(tmp_path / "plain"))
    yield srv
    srv.stop()


def _done_run(srv: Server, tmp_path: Path) -> str:
    answer = write_script(tmp_path / "a.jsonl", [{"content": [{"kind": "text", "text": "ok"}]}])
    with srv.client() as c:
        run = c.post("/runs", json={"task": "t", "model": f"script:{answer}"}).json()["run"]
        wait_state(c, run, ("done",))
    return str(run)


@pytest.mark.parametrize(
    ("params", "headers"),
    [
        ({"since": "-5"}, {}),
        ({}, {"Last-Event-ID": "-7"}),
        ({"since": "x"}, {}),
        ({}, {"Last-Event-ID": "seven"}),
        ({}, {"Last-Event-ID": "-1"}),
        ({"since": str(2**63)}, {}),
        ({}, {"Last-Event-ID": str(2**63)}),
    ],
)
def test_a_bad_seq_is_refused_alike_as_since_or_last_event_id(
    plain: Server, tmp_path: Path, params: dict[str, str], headers: dict[str, str]
) -> None:
    run = _done_run(plain, tmp_path)
    with plain.client() as c:
        resp = c.get(f"/runs/{run}/events", params=params, headers=headers)
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["error"]["code"] == "E_INVALID_ARGS"
    where = "query.since" if params else "header.last-event-id"
    assert body["error"]["subject"] == where
    assert body["message"].startswith("E_INVALID_ARGS: cannot read the request")


def test_a_good_seq_works_either_way(plain: Server, tmp_path: Path) -> None:
    run = _done_run(plain, tmp_path)
    with plain.client() as c:
        lines = c.get(f"/runs/{run}", params={"lines": True}).json()["lines"]
        second = lines[1]["seq"]
        by_since = c.get(f"/runs/{run}/events", params={"since": second + 1})
        by_header = c.get(f"/runs/{run}/events", headers={"Last-Event-ID": str(second)})
    assert by_since.status_code == by_header.status_code == 200
    assert by_since.text == by_header.text and f"id: {second + 1}\n" in by_since.text


def _count_runs(srv: Server) -> int:
    with srv.client() as c:
        return len(c.get("/runs").json()["runs"])


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_past_the_ceiling_is_413_and_changes_nothing(served: Server, chunked: bool) -> None:
    before = _count_runs(served)
    with Workspace.open(served.root) as ws:
        head = ws.verify().head
    body = b'{"task": "' + b"x" * 30_000 + b'"}'
    with served.client() as c:
        if chunked:  # no Content-Length: the bytes are counted as they arrive
            resp = c.post("/runs", content=iter([body[i : i + 1000] for i in range(0, len(body), 1000)]),
                          headers={"content-type": "application/json"})
        else:
            resp = c.post("/runs", content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 413, resp.text
        err = resp.json()["error"]
        assert err["code"] == "E_INVALID_ARGS" and err["subject"] == "the request body"
        assert "4,096 bytes" in err["action"] and "--max-body" in err["recovery"]
        # the server is still there and nothing was dispatched or written
        assert c.get("/health").json() == {"ok": True}
    assert _count_runs(served) == before
    with Workspace.open(served.root) as ws:
        assert ws.verify().head == head


def test_a_body_under_the_ceiling_is_taken(served: Server, tmp_path: Path) -> None:
    answer = write_script(tmp_path / "a.jsonl", [{"content": [{"kind": "text", "text": "ok"}]}])
    with served.client() as c:
        resp = c.post("/runs", json={"task": "y" * 3000, "model": f"script:{answer}"})
        assert resp.status_code == 202, resp.text
        wait_state(c, resp.json()["run"], ("done",))


def test_the_default_ceiling_is_one_mebibyte(tmp_path: Path) -> None:
    srv = start_server(make_workspace(tmp_path / "ws"))
    try:
        with srv.client() as c:
            resp = c.post("/runs", json={"task": "x" * (30 * 1024 * 1024)})
            assert resp.status_code == 413, resp.text
            assert "1,048,576 bytes" in resp.json()["error"]["action"]
    finally:
        srv.stop()
