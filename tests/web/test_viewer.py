"""What the pages read: the run-summary fold fed in parts equals one fold, a page of a run's
lines read through the index equals the slice of all of them, and the live tail (a real
`runfold view` process) sends lines in seq order and resumes after `Last-Event-ID`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from web_support import garden, view_server

from runfold.api import Workspace
from runfold.core import fold as fold_api


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("viewer") / "ws"
    run = garden(root)
    with Workspace.open(root) as w:
        w.fork(run, 9)  # a second run, interleaved with nothing: its lines follow the first's
        w.fork(run, 12)
    return root, run


@given(cut=st.integers(min_value=0, max_value=40))
def test_the_summary_fold_fed_in_parts_equals_one_fold(ws: tuple[Path, str], cut: int) -> None:
    root, _ = ws
    with Workspace.open(root) as w:
        lines = w.records()
        whole = [s.to_data() for s in w.run_summaries()]
        folder = w.summary_folder()
        for rec in lines[:cut]:
            folder.feed(rec)
        early = [s.to_data() for s in folder.summaries()]
        assert early == [s.to_data() for s in fold_api.run_summaries(lines[:cut], folder.prices)]
        parts = [s.to_data() for s in w.run_summaries(into=folder)]
    assert parts == whole
    assert any(s["ended_ms"] for s in whole) and any(s["status"] == "not_started" for s in whole)


@given(since=st.integers(min_value=0, max_value=30), limit=st.one_of(st.none(), st.integers(0, 25)))
def test_a_page_of_a_runs_lines_is_the_slice_of_all_of_them(ws: tuple[Path, str], since: int, limit: int | None) -> None:
    root, run = ws
    with Workspace.open(root) as w:
        every = [r.seq for r in w.records(run=run)]
        page = [r.seq for r in w.records(run=run, since=since, limit=limit)]
    assert page == [s for s in every if s >= since][:limit]


def _events(url: str, headers: dict[str, str], want: int) -> list[tuple[int, dict[str, object]]]:
    out: list[tuple[int, dict[str, object]]] = []
    with httpx.stream("GET", url, headers=headers, timeout=60) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        ident = None
        for line in resp.iter_lines():
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("data: ") and ident is not None:
                out.append((ident, json.loads(line[6:])))
                ident = None
                if len(out) == want:
                    break
    return out


def test_the_live_tail_sends_lines_in_seq_order_and_resumes_after_last_event_id(ws: tuple[Path, str]) -> None:
    root, run = ws
    with Workspace.open(root) as w:
        seqs = [r.seq for r in w.records(run=run)]
        every = w.seq_range()
    with view_server(root) as url:
        got = _events(f"{url}/runs/{run}/tail", {}, len(seqs))
        assert [i for i, _ in got] == seqs
        assert all(d["seq"] == i and d["run"] == run for i, d in got)
        resumed = _events(f"{url}/runs/{run}/tail", {"Last-Event-ID": str(seqs[4])}, len(seqs) - 5)
        assert [i for i, _ in resumed] == seqs[5:]
        whole = _events(f"{url}/tail?since=3", {}, len(every) - 3)
        assert [i for i, _ in whole] == list(every)[3:]


class _Connected:
    """The request of a tail whose client stays connected."""

    async def is_disconnected(self) -> bool:
        return False


def test_the_tail_of_a_postgresql_workspace_is_woken_by_notify_not_by_a_poll(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runfold.core.records import Draft
    from runfold.store.backend import open_ledger
    from runfold.web import live
    from runfold.web.viewer import Viewer

    root = Workspace.init(tmp_path / "ws", pg_url).root
    monkeypatch.setattr(live, "POLL_S", 3600.0)  # a poll would come far too late
    monkeypatch.setattr(live, "NOTIFY_WAIT_S", 3600.0)  # only the writer's NOTIFY ends a wait
    run = "0190f6a2-7c4a-7bbb-9d1e-00000000000a"

    def commit_a_line() -> None:
        with open_ledger(root, writer=True) as w:
            w.append([Draft(run, "lab/room1", "steer_received", {"source": "user", "text": "hi"}, addr="lab/room1")])

    async def main() -> None:
        events = live.tail_events(Viewer(root), _Connected(), None, 0)
        assert await anext(events) == "retry: 1000\n\n"
        assert (await asyncio.wait_for(anext(events), 60)).startswith("id: 0\n")  # the history
        waiting = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # nothing new: the tail waits
        await asyncio.to_thread(commit_a_line)
        line = await asyncio.wait_for(waiting, 60)
        assert line.startswith("id: 1\nevent: line\n") and '"kind": "steer_received"' in line
        await events.aclose()

    asyncio.run(main())
