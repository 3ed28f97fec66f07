"""Compaction across a run's lineage (DESIGN.md §7, §10): a successor whose model has a smaller
window is compacted before its first request; continuing a compacted run inherits the compacted
window; reminders reach the model through the steer door, once per threshold per cycle."""

from __future__ import annotations

from pathlib import Path

from cp_support import changes, check_run, config_toml, read, reply, say, two_scripts, workspace

from runfold.api import Workspace
from runfold.core.kinds import Kind


def _files(root: Path, n: int, size: int) -> None:
    for i in range(n):
        (root / f"f{i}.txt").write_text("q" * size)


def test_a_successor_with_a_smaller_window_is_compacted_before_its_first_request(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws = workspace(root, window=60000)
    _files(root, 6, 2500)
    turns = [reply(say(f"r{i}"), read(f"c{i}", f"f{i}.txt")) for i in range(6)]
    p = two_scripts(turns, [], "anthropic")  # runs out of replies: the run fails, to be continued
    first = ws.run("read them", model=p, builtin_tools=["read_file"])
    assert first.completion == "failed" and not changes(ws.records(run=first.run_id))
    ws.close()
    (root / ".runfold" / "config.toml").write_text(config_toml(4000))
    q = two_scripts([reply(say("done"))], [reply(say("summary: six files of q"))], "anthropic")
    second = Workspace.open(root).continue_run(first.run_id, model=q, builtin_tools=["read_file"])
    ws = Workspace.open(root)
    lines = ws.records(run=second.run_id)
    kinds = [r.kind_name for r in lines]
    assert kinds.index("context_changed") < kinds.index("prompt_assembled")
    shapes = [r.env.data["conversation"] for r in lines if r.kind_name == "prompt_shape_compared"]
    assert shapes[0] == "first"  # nothing was sent in this run before the compaction
    assert second.completion == "done", second.reason
    check_run(ws, second.run_id, q.requests)
    ws.close()


def test_continuing_a_compacted_run_inherits_the_compacted_window(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws = workspace(root, window=5000)
    _files(root, 8, 2000)
    turns = [reply(say(f"r{i}"), read(f"c{i}", f"f{i}.txt")) for i in range(8)]
    p = two_scripts(turns, [reply(say("summary"))] * 8)
    first = ws.run("read them", model=p, builtin_tools=["read_file"])
    assert changes(ws.records(run=first.run_id))
    tail = ws.fold(first.run_id).messages
    q = two_scripts([reply(say("done"))], [reply(say("summary"))] * 2)
    second = ws.continue_run(first.run_id, model=q, builtin_tools=["read_file"])
    assert second.completion == "done", second.reason
    child = ws.records(run=second.run_id)
    inherited = ws.fold(second.run_id, child[1].seq).messages  # run_started, run_forked
    assert inherited[: len(tail) - 1] == tail[:-1]
    check_run(ws, second.run_id, q.requests)
    ws.close()


def test_reminders_come_through_the_steer_door_once_per_threshold_per_cycle(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws = workspace(root, window=6000, extra="reminders_permille = [500, 250, 100]")
    _files(root, 14, 700)
    turns = [reply(say(f"r{i}"), read(f"c{i}", f"f{i}.txt")) for i in range(14)]
    turns.append(reply(say("done")))
    p = two_scripts(turns, [reply(say("summary"))] * 8)
    out = ws.run("read them", model=p, builtin_tools=["read_file"])
    assert out.completion == "done", out.reason
    lines = ws.records(run=out.run_id)
    cycle: list[str] = []
    cycles = [cycle]
    for r in lines:
        if r.kind is Kind.STEER_RECEIVED:
            assert r.env.data["source"] == "runtime"
            cycle.append(r.env.data["text"])
        elif r.kind is Kind.CONTEXT_CHANGED:
            cycle = []
            cycles.append(cycle)
    assert any(cycles), "no reminder was given"
    for c in cycles:
        assert len(c) <= 3
    folded = ws.fold(out.run_id, lines[-1].seq).messages
    texts = [b["text"] for m in folded for b in m["content"] if b["kind"] == "text"]
    assert all(not t.startswith("user:") for t in texts if "of its budget left" in t)
    check_run(ws, out.run_id, p.requests)
    ws.close()


def test_a_run_cancelled_during_its_summary_call_folds_and_continues(tmp_path: Path) -> None:
    import asyncio

    from runfold.core.records import Record

    root = tmp_path / "ws"
    ws = workspace(root, window=5000)
    _files(root, 8, 300)
    turns = [reply(say(f"r{i} " + "w" * 1500), read(f"c{i}", f"f{i}.txt")) for i in range(8)]
    p = two_scripts(turns, [{**reply(say("late summary")), "delay_ms": 5000}])
    cancel = asyncio.Event()

    def on_event(rec: Record) -> None:
        if rec.kind_name == "model_called" and rec.env.data.get("purpose") == "compaction":
            cancel.set()

    out = ws.run("read them", model=p, builtin_tools=["read_file"], on_event=on_event, cancel=cancel)
    assert out.completion == "cancelled", out.reason
    lines = ws.records(run=out.run_id)
    failed = [c for c in changes(lines) if c.get("failed")]
    assert failed and "cancelled" in failed[0]["failed"]
    check_run(ws, out.run_id, p.requests)
    q = two_scripts([reply(say("done"))], [reply(say("summary"))] * 2)
    second = ws.continue_run(out.run_id, model=q, builtin_tools=["read_file"])
    assert second.completion == "done", second.reason
    check_run(ws, second.run_id, q.requests)
    ws.close()
