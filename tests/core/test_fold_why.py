"""`why` (DESIGN.md §10): every block of the window attributed to its line and cause, sizes per
region and cause add up, held text lands later than its line, unexplained prefix changes stay
unattributed, and the changes between two points."""

from __future__ import annotations

from typing import Any

import pytest
from test_fold import FOREIGN_RUN, read_fixture
from test_fold_support import Book, MemLedger, RunBuilder, lines_of, rid, write_base_runs

from runfold.core.canonical import encode_json
from runfold.core.conversation import CAUSES
from runfold.core.fold import fold_run, group_by_run, safe_points, why_report
from runfold.core.records import Draft
from runfold.core.tokens import estimate_tokens


@pytest.fixture(scope="module")
def world() -> tuple[dict[str, RunBuilder], dict[str, Any]]:
    mem = MemLedger()
    runs = write_base_runs(Book(mem.append))
    return runs, lines_of(mem.records)


def test_every_block_is_attributed_and_sizes_add_up(world: Any) -> None:
    runs, lines = world
    for b in runs.values():
        for cut in safe_points(lines, b.run):
            report = why_report(lines, b.run, cut)
            fold = fold_run(lines, b.run, cut)
            conv = [p for p in report.parts if p.region == "conversation"]
            blocks = [
                (blk, src)
                for m, s in zip(fold.messages, fold.sources, strict=True)
                for blk, src in zip(m["content"], s, strict=True)
            ]
            assert len(conv) == len(blocks)
            for part, (blk, src) in zip(conv, blocks, strict=True):
                assert (part.seq, part.cause) == (src.seq, src.cause)
                assert part.cause in CAUSES
                assert part.bytes == len(encode_json(blk))
                assert part.landed is not None and part.seq <= part.landed <= cut
            total = report.total.bytes
            assert sum(s.bytes for s in report.by_region().values()) == total
            assert sum(s.bytes for s in report.by_cause().values()) == total
            assert report.total.tokens == estimate_tokens(total) == (total + 3) // 4
            # the changes rebuild the conversation region exactly
            added = sum(c.bytes for c in report.changes if c.region == "conversation")
            assert added == report.by_region()["conversation"].bytes


def test_held_steer_lands_with_the_results_and_keeps_its_cause(world: Any) -> None:
    runs, lines = world
    report = why_report(lines, runs["A"].run)
    steer = next(p for p in report.parts if p.cause == "message" and p.landed != p.seq)
    # the wave commits at its last result: that is where the held text lands
    result_seq = max(
        p.seq or 0 for p in report.parts if p.cause == "tool_result" and p.message == steer.message
    )
    assert steer.landed == result_seq > steer.seq
    change = next(c for c in report.changes if c.source_seq == steer.seq)
    assert change.seq == steer.landed and change.cause == "message"


def test_foreign_ledger_causes() -> None:
    report = why_report(group_by_run(read_fixture()), FOREIGN_RUN)
    assert {p.cause for p in report.parts} == {"seed", "model_reply", "tool_result", "message"}
    system = [p for p in report.parts if p.region == "system"]
    assert [(p.name, p.bytes, p.seq, p.cause) for p in system] == [
        ("city", 20, 2, "seed"),
        ("building", 15, 2, "seed"),
        ("resident", 12, 2, "seed"),
        ("run", 61, 2, "seed"),
    ]
    # later assemblies with the same segments change nothing
    assert not [c for c in report.changes if c.region == "system" and c.seq > 2]


def test_changes_between_two_points() -> None:
    records = read_fixture()
    report = why_report(group_by_run(records), FOREIGN_RUN, 17, since=7)
    assert [(c.seq, c.cause, c.source_seq) for c in report.changes] == [
        (12, "model_reply", 11),
        (12, "tool_result", 12),
        (15, "model_reply", 15),
    ]


def test_a_prefix_change_without_a_cause_is_unattributed_and_a_region_line_keeps_its_own() -> None:
    mem = MemLedger()
    book = Book(mem.append)
    a = RunBuilder(book, rid(5))
    a.start("t")
    a.turn(text="one", calls=1)
    changed = {
        "segments": [
            {"slot": "workspace", "hash": "e" * 64, "len": 150},
            {"slot": "run", "hash": "b" * 64, "len": 40},
        ],
        "tools": {"hash": "c" * 64, "bytes": 300},
        "breakpoints": [],
    }
    (pa,) = mem.append([Draft(a.run, "runtime", "prompt_assembled", changed)])
    a.busy = True
    (cc,) = mem.append(
        [
            Draft(
                a.run,
                "runtime",
                "context_changed",
                {"region": "todo", "cause": "context_tool", "added": ["x"], "removed": [], "token_delta": 3},
            )
        ]
    )
    mem.append([Draft(a.run, "runtime", "prompt_shape_compared", {})])
    mem.append([Draft(a.run, "x", "model_called", {"model": "m1"})])
    mem.append(
        [
            Draft(
                a.run,
                "x",
                "model_returned",
                {"message": {"content": [{"kind": "text", "text": "ok"}]}, "calls": 0},
            )
        ]
    )
    report = why_report(lines_of(mem.records), a.run)
    moved = [c for c in report.changes if c.seq == pa.seq]
    assert [(c.what, c.cause, c.bytes) for c in moved] == [("changed workspace", None, 30)]
    assert next(p for p in report.parts if p.name == "workspace").cause is None
    assert report.by_cause()["unattributed"].bytes == 150
    region = next(c for c in report.changes if c.seq == cc.seq)
    assert (region.region, region.cause) == ("todo", "context_tool")
