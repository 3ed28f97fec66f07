"""Resume and continue (DESIGN.md §7): a crash after any line of a run with parallel
waves and writing tools leaves, after resume, a history every dialect accepts; resume is
idempotent; continue inherits the conversation and replays byte-exact.

A crash after line k is reproduced exactly by copying lines 1..k of a finished run into a fresh
workspace (the writer re-chains them): the same state a SIGKILL after that line's fsync leaves.
The real-kill version of this test lives in tests/crash/.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from rt_support import call, calls, check_finished, text

from runfold.api import Workspace
from runfold.core.errors import ErrorCode
from runfold.core.fold import fold_run
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.records import Draft, Record
from runfold.providers.scripted import ScriptedProvider
from runfold.runtime.resume import MARK_FILE


def _script() -> list[dict[str, Any]]:
    return [
        calls(
            [
                ("c1", "read_file", {"path": "notes.txt"}),
                ("c2", "write_file", {"path": "out.txt", "content": "one"}),
                ("c3", "list_dir", {"path": "."}),
            ],
            say="three at once",
        ),
        call("c4", "edit_file", {"path": "out.txt", "old": "one", "new": "two"}),
        calls([("c5", "read_file", {"path": "out.txt"}), ("c6", "search", {"pattern": "alpha"})]),
        text("all done"),
    ]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, list[Record]]:
    root = tmp_path_factory.mktemp("mother")
    ws = Workspace.init(root)
    (root / "notes.txt").write_text("alpha\nbeta\n")
    out = ws.run("do the three things", model=ScriptedProvider.of(_script(), dialect="anthropic"))
    assert out.completion == "done", out.reason
    check_finished(ws, out)
    return ws, ws.records()


def _crashed_copy(root: Path, lines: list[Record], k: int, source: Path) -> Workspace:
    """A workspace holding lines 1..k of `lines` (a crash right after line k was durable)."""
    ws = Workspace.init(root)
    cas_src, cas_dst = source / ".runfold" / "cas", root / ".runfold" / "cas"
    if cas_src.exists():
        import shutil

        shutil.copytree(cas_src, cas_dst, dirs_exist_ok=True)
    drafts = [
        Draft(r.run, r.env.who, r.env.kind, dict(r.env.data), addr=r.env.addr, t=r.env.t)
        for r in lines[1 : k + 1]
    ]
    with ws.writer(resume=False) as ledger:
        ledger.append(drafts)
    return ws


def _assert_resumed(ws: Workspace) -> None:
    recs = ws.records()
    called = {r.env.data["id"]: r for r in recs if r.env.kind == "tool_called"}
    answered = {r.env.data["tool_use_id"] for r in recs if r.env.kind == "tool_result"}
    assert set(called) <= answered, "a tool_called was left without a result"
    runs = {r.run for r in recs} - {WORKSPACE_RUN}
    frozen = {r.run for r in recs if r.env.kind == "run_frozen"}
    assert runs == frozen, "a run was left without run_frozen"
    for run in runs:
        fold_run(ws.lineage_lines(run), run)
        view = ws.request_at(run)
        assert all(v == [] for v in view.verdicts.values()), view.verdicts


def test_crash_after_every_line_then_resume_and_continue(
    finished: tuple[Workspace, list[Record]], tmp_path: Path
) -> None:
    mother_ws, lines = finished
    run = lines[1].run
    for k in range(1, len(lines) - 1):  # the last line is run_frozen: nothing to resume
        ws = _crashed_copy(tmp_path / f"k{k}", lines, k, mother_ws.root)
        report = ws.resume()
        assert [lost.run for lost in report.frozen] == [run], k
        dangling = [
            r.env.data["id"]
            for r in lines[1 : k + 1]
            if r.env.kind == "tool_called"
            and not any(
                x.env.kind == "tool_result" and x.env.data["tool_use_id"] == r.env.data["id"]
                for x in lines[1 : k + 1]
            )
        ]
        assert [c.tool_use_id for c in report.closed] == dangling, k
        frozen_line = ws.records(run=run)[-1]
        assert frozen_line.env.data == {"completion": "cancelled", "cause": "process_died"}
        for closed in ws.records(kind="tool_result")[-len(dangling) or len(lines) :]:
            if closed.env.who == "runtime" and closed.env.data["tool_use_id"] in dangling:
                assert closed.env.data["error"]["code"] == ErrorCode.TOOL_OUTCOME_UNKNOWN.value
            elif closed.env.who == "runtime":  # asked for, never recorded: answered as not started
                assert "not started" in closed.env.data["error"]["action"]
        _assert_resumed(ws)
        before = len(ws.records())
        again = ws.resume()
        assert not again.wrote and len(ws.records()) == before, "resume is not idempotent"
        # continue: the successor's first request is valid and replays byte-exact
        out = ws.run(
            "",
            model=ScriptedProvider.of([text("carrying on")], dialect="openai-chat"),
            continues=run[:13],
        )
        assert out.completion == "done", (k, out.reason)
        check_finished(ws, out)
        started = ws.records(run=out.run_id)[0]
        assert started.env.data["predecessor"] == run
        note = ws.records(run=out.run_id, kind="steer_received")[0]
        assert note.env.data["source"] == "runtime"
        called = any(r.env.kind == "model_called" for r in lines[1 : k + 1])
        why = "process running it died" if called else "had not called a model yet"
        assert why in note.env.data["text"], k
        if dangling:
            assert "outcome is unknown" in note.env.data["text"]
        _assert_resumed(ws)


def test_writer_open_resumes_incrementally_from_the_clean_mark(
    finished: tuple[Workspace, list[Record]], tmp_path: Path
) -> None:
    mother_ws, lines = finished
    ws = _crashed_copy(tmp_path / "w", lines, 5, mother_ws.root)
    with ws.writer() as _:
        pass
    assert ws.last_resume is not None and ws.last_resume.scanned_from == 0
    assert [lost.run for lost in ws.last_resume.frozen] == [lines[1].run]
    tail = len(ws.records())
    assert (ws.root / ".runfold" / MARK_FILE).exists()
    out = ws.run("again", model=ScriptedProvider.of([text("ok")], dialect="anthropic"))
    assert out.completion == "done"
    with ws.writer() as _:
        pass
    assert ws.last_resume is not None
    assert ws.last_resume.scanned_from == tail and not ws.last_resume.wrote
    assert ws.last_resume.scanned_lines == len(ws.records()) - tail
    # a mark that does not match the ledger is ignored (full scan), never trusted
    (ws.root / ".runfold" / MARK_FILE).write_text('{"seq": 3, "hash": "00"}')
    with ws.writer() as _:
        pass
    assert ws.last_resume.scanned_from == 0 and not ws.last_resume.wrote


def test_continue_refuses_a_running_run_and_names_the_way(tmp_path: Path) -> None:
    import asyncio

    ws = Workspace.init(tmp_path / "ws")

    async def both() -> None:
        slow = ScriptedProvider.of([text("slow", delay_ms=5_000)], dialect="anthropic")
        called: list[str] = []
        first = asyncio.ensure_future(
            ws.arun(
                "long",
                model=slow,
                on_event=lambda r: called.append(r.run) if r.env.kind == "model_called" else None,
            )
        )
        while not called:
            await asyncio.sleep(0.01)
        with pytest.raises(Exception) as refused:
            await ws.arun("", model=ScriptedProvider.of([text("x")]), continues=called[0])
        assert getattr(refused.value, "code", None) is ErrorCode.INVALID_ARGS
        assert "cancel" in refused.value.recovery  # type: ignore[attr-defined]
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first

    asyncio.run(both())
    assert ws.run_summaries()[0].status == "cancelled"


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, list[Record]]:
    """Two runs driven concurrently by one process: their lines interleave, so a crash leaves
    dangling calls in a run that is not at the ledger's tail."""
    import asyncio

    root = tmp_path_factory.mktemp("pair")
    ws = Workspace.init(root)
    (root / "notes.txt").write_text("alpha\nbeta\n")

    def slow_script(tag: str) -> ScriptedProvider:
        entries = _script()
        for i, e in enumerate(entries):
            e["delay_ms"] = 20 + 15 * i
            for b in e["content"]:
                if b["kind"] == "tool_use":
                    b["id"] = f"{tag}-{b['id']}"
                    b["input"] = b["input"].replace("out.txt", f"out-{tag}.txt")
        return ScriptedProvider.of(entries, dialect="anthropic")

    async def both() -> None:
        outs = await asyncio.gather(
            ws.arun("first", model=slow_script("a")), ws.arun("second", model=slow_script("b"))
        )
        assert [o.completion for o in outs] == ["done", "done"], [o.reason for o in outs]

    asyncio.run(both())
    return ws, ws.records()


def test_crash_inside_interleaved_runs_closes_every_run(
    interleaved: tuple[Workspace, list[Record]], tmp_path: Path
) -> None:
    mother_ws, lines = interleaved
    runs_seen = [r.run for r in lines[1:]]
    assert len(set(runs_seen)) == 2
    switches = sum(1 for a, b in itertools.pairwise(runs_seen) if a != b)
    assert switches > 2, "the two runs did not interleave"
    for k in range(1, len(lines) - 1, 2):
        ws = _crashed_copy(tmp_path / f"k{k}", lines, k, mother_ws.root)
        report = ws.resume()
        prefix = lines[1 : k + 1]
        open_runs = {r.run for r in prefix} - {r.run for r in prefix if r.env.kind == "run_frozen"}
        assert {lost.run for lost in report.frozen} == open_runs, k
        _assert_resumed(ws)
        assert not ws.resume().wrote


def test_a_run_an_error_froze_reads_failed_with_its_code(tmp_path: Path) -> None:
    from runfold.core.fold.runs import status_text

    ws = Workspace.init(tmp_path / "ws")
    same = [call(f"c{i}", "list_dir", {}) for i in range(5)]
    out = ws.run("loop", model=ScriptedProvider.of(same))
    assert out.completion == "failed" and out.error is not None
    summary = ws.run_summaries()[0]
    assert (summary.status, summary.cause) == ("cancelled", "error")  # the ledger's words
    assert status_text(summary) == f"failed ({out.error.code.value})"
    assert summary.to_data()["error_code"] == out.error.code.value
    assert [s.run for s in ws.waiting_runs()] == [out.run_id]
