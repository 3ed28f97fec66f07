"""Fork (DESIGN.md §7) through the real store: fork at every seq of a multi-run ledger (parallel
waves, steers between reply and wave, empty replies, cancels, forks of forks), the foreign ledger
forked at each of its 18 seqs, the raw prefix, refusals that name the valid range."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from test_fold_support import Book, RunBuilder, check_valid, lines_of, write_base_runs

from runfold.api import Workspace
from runfold.core.conversation import BlockSource
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.fold import fold_run, lineage, plan_fork, raw_prefix, safe_points
from runfold.core.ids import run_id_v7
from runfold.core.payloads import RunStarted
from runfold.core.records import Record
from runfold.core.speakers import render_opening
from runfold.store.ledger import Ledger

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sprawling-golden-p0.jsonl"
FOREIGN_RUN = "0198f6a2-7c4a-7bbb-9d1e-00000000040a"


def fresh_id(n: int) -> str:
    return run_id_v7(1_800_000_000_000 + n, n.to_bytes(10, "big"))


def own_safe(ws: Workspace, book: Book, run: str) -> None:
    """Add a fork's run_started and run_forked (written by the API) to the oracle."""
    first, forked = ws.records(run=run)[:2]
    book.safe.setdefault(run, [])[:0] = [first.seq, forked.seq]


def oracle(book: Book, lines: dict[str, list[Record]], run: str) -> list[int]:
    """Safe cut points of a run's lineage from the builder's oracle (mothers cut at the fork)."""
    lin = lineage(lines, run)
    out: list[int] = []
    for step in lin.steps:
        out += [s for s in book.safe[step.run] if step.first <= s <= step.last]
    return out


def child_expectation(lines: dict[str, list[Record]], mother: str, cut: int, child: str) -> Any:
    """The child's conversation after its opening: the mother's fold at the cut, inherited, plus
    the child's `inherited` opening."""
    start = lines[child][0]
    started = start.typed(RunStarted)
    conv = fold_run(lines, mother, cut).inherited()
    text = render_opening(
        "inherited", task=started.task, goal=started.goal, handed_down_by=started.dispatched_by or ""
    )
    conv.open_with(text, BlockSource(start.seq, "seed"))
    return conv


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Book, dict[str, str]]:
    ws = Workspace.init(tmp_path_factory.mktemp("world"))
    with ws.writer(resume=False) as led:
        book = Book(led.append)
        builders = write_base_runs(book)
    names = {k: b.run for k, b in builders.items()}
    a_lines = ws.records(run=names["A"])
    # fork A inside its second wave: the cut moves back to the end of the first wave
    wave_line = [r for r in a_lines if r.kind_name == "tool_called"][3]
    p1 = ws.fork(names["A"], wave_line.seq, task="try another way", resume=False)
    assert p1.moved is not None and p1.cut < wave_line.seq
    own_safe(ws, book, p1.new_run)
    with ws.writer(resume=False) as led:
        book.append = led.append
        child = RunBuilder(book, p1.new_run)
        child.turn(text="branching", calls=2, before_wave=["careful"])
        child.turn(text="branch done")
        child.end("done")
    names["F1"] = p1.new_run
    f1_own = [r.seq for r in ws.records(run=p1.new_run)]
    # a fork of the fork inside its own part, and one inside the part it inherited from A
    p2 = ws.fork(p1.new_run, f1_own[5], resume=False)
    own_safe(ws, book, p2.new_run)
    p3 = ws.fork(p1.new_run, a_lines[3].seq, resume=False)
    own_safe(ws, book, p3.new_run)
    with ws.writer(resume=False) as led:
        book.append = led.append
        g = RunBuilder(book, p2.new_run)
        g.turn(text="grandchild", calls=1, before_call=["held until the results"])
    names["F2"], names["F3"] = p2.new_run, p3.new_run
    # three levels deep
    p4 = ws.fork(p2.new_run, ws.records(run=p2.new_run)[-1].seq, resume=False)
    own_safe(ws, book, p4.new_run)
    names["F4"] = p4.new_run
    return ws, book, names


def test_forks_record_the_cut_and_lineage(world: Any) -> None:
    ws, book, names = world
    lines = lines_of(ws.records())
    for key in ("F1", "F2", "F3", "F4"):
        run = names[key]
        assert safe_points(lines, run) == oracle(book, lines, run), key
    assert [s.run for s in lineage(lines, names["F4"]).steps] == [
        names["A"],
        names["F1"],
        names["F2"],
        names["F4"],
    ]
    assert [s.run for s in lineage(lines, names["F3"]).steps] == [names["A"], names["F3"]]


def test_fork_at_every_seq_of_every_run(world: Any) -> None:
    """Pure planning at every seq of every run's lineage, then the planned lines appended through
    the real writer and each child folded: the inherited conversation validates for all three
    dialects, equals the mother's fold at the reported cut, and the cut is the last safe point."""
    ws, book, _ = world
    lines = lines_of(ws.records())
    runs = [r for r in lines if r != "00000000-0000-0000-0000-000000000000"]
    planned = []
    n = 0
    with ws.writer(resume=False) as led:
        tail = led.next_seq - 1
        for run in runs:
            safe = oracle(book, lines, run)
            for seq in lineage(lines, run).seqs():
                n += 1
                plan = plan_fork(lines, run, seq, new_run=fresh_id(n), tail=tail)
                assert plan.cut == max(s for s in safe if s <= seq), (run, seq)
                assert (plan.moved is None) == (plan.cut == seq)
                assert plan.drafts[1].data_object() == {"from": run, "at_seq": plan.cut}
                started = plan.drafts[0].data_object()
                assert started["opening"] == "inherited" and started["parent"] == run
                assert check_valid(plan.inherited.inherited().messages) == [], (run, seq)
                led.append(list(plan.drafts))
                planned.append(plan)
    assert n > 150
    after = lines_of(ws.records())
    for plan in planned:
        child = fold_run(after, plan.new_run)
        expected = child_expectation(after, plan.mother, plan.cut, plan.new_run)
        assert child.messages == expected.messages and child.sources == expected.sources
        assert check_valid(child.messages) == []
    # the mothers are untouched: every original line is still there, byte for byte
    for run, recs in lines.items():
        assert [r.raw for r in after[run]] == [r.raw for r in recs]
    ws.verify()


def test_no_request_a_fold_produces_is_rejected(world: Any) -> None:
    """Every safe point of every run of the fork world, forks of forks included."""
    ws, _, _ = world
    lines = lines_of(ws.records())
    for run in lines:
        if run == "00000000-0000-0000-0000-000000000000":
            continue
        for cut in safe_points(lines, run):
            fold = fold_run(lines, run, cut)
            assert check_valid(fold.inherited().messages) == [], (run, cut)
            if not fold.conversation.held:
                assert check_valid(fold.messages) == [], (run, cut)


def test_fork_through_the_api_at_every_seq_of_a_run(world: Any) -> None:
    ws, book, names = world
    lines = lines_of(ws.records())
    run = names["F2"]
    safe = oracle(book, lines, run)
    for seq in lineage(lines, run).seqs():
        plan = ws.fork(run[:13], seq, resume=False)
        assert plan.cut == max(s for s in safe if s <= seq)
        after = lines_of(ws.records())
        child = ws.fold(plan.new_run)
        assert child.messages == child_expectation(after, run, plan.cut, plan.new_run).messages
        assert check_valid(child.messages) == []
    ws.verify()


def test_fork_refuses_seqs_outside_the_lineage_never_clamps(world: Any) -> None:
    ws, _, names = world
    with Ledger.open(ws.root, writer=False) as led:
        tail = led.next_seq - 1
    before = ws.records()
    for bad in (tail + 1, tail + 100, 0, ws.records(run=names["B"])[2].seq):
        with pytest.raises(RunfoldError) as info:
            ws.fork(names["A"], bad, resume=False)
        assert info.value.code is ErrorCode.INVALID_ARGS
        assert f"tail is seq {tail}" in info.value.recovery
        assert "run " + names["A"][:8] in info.value.recovery
    assert [r.raw for r in ws.records()] == [r.raw for r in before]
    # the lineage of a fork: A's lines after the fork point are not the fork's
    a_after_cut = [r.seq for r in ws.records(run=names["A"])][-1]
    with pytest.raises(RunfoldError):
        ws.fork(names["F1"], a_after_cut, resume=False)


def test_raw_prefix_is_byte_identical(world: Any) -> None:
    ws, _, names = world
    ledger_bytes = b"".join(
        p.read_bytes() for p in sorted((ws.root / ".runfold" / "ledger").glob("ledger-*.jsonl"))
    )
    for rec in ws.records(run=names["F1"])[:3]:
        prefix = ws.raw_prefix(names["F1"], rec.seq)
        assert ledger_bytes.startswith(prefix) and prefix.count(b"\n") == rec.seq + 1
    records = ws.records()
    assert raw_prefix(records, 5) == b"".join(r.raw + b"\n" for r in records[:6])
    with pytest.raises(RunfoldError):
        raw_prefix(records, len(records))


# ---- the foreign ledger ---------------------------------------------------------------------------


def foreign_workspace(tmp: Path) -> Workspace:
    ledger_dir = tmp / ".runfold" / "ledger"
    ledger_dir.mkdir(parents=True)
    shutil.copyfile(FIXTURE, ledger_dir / "ledger-00000000000000000000.jsonl")
    return Workspace.open(tmp)


def test_foreign_ledger_forks_at_each_of_its_18_seqs(tmp_path: Path) -> None:
    ws = foreign_workspace(tmp_path)
    safe = [1, 7, 12, 15, 16, 17]
    original = FIXTURE.read_bytes()
    for seq in range(18):
        if seq == 0:  # the workspace's checkpoint line is no line of the run
            with pytest.raises(RunfoldError) as info:
                ws.fork(FOREIGN_RUN, 0, resume=False)
            assert info.value.code is ErrorCode.INVALID_ARGS and "seqs 1–17" in info.value.recovery
            continue
        plan = ws.fork(FOREIGN_RUN, seq, resume=False)
        assert plan.cut == max(s for s in safe if s <= seq)
        child = ws.fold(plan.new_run)
        assert check_valid(child.messages) == []
        lines = lines_of(ws.records())
        assert child.messages == child_expectation(lines, FOREIGN_RUN, plan.cut, plan.new_run).messages
    report = ws.verify()
    assert report is not None
    segment = (tmp_path / ".runfold" / "ledger" / "ledger-00000000000000000000.jsonl").read_bytes()
    assert segment.startswith(original)  # the foreign lines are untouched; forks appended after
    assert len(ws.records()) == 18 + 2 * 17
