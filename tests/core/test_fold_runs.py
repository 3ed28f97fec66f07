"""The runs fold and the lineage tree: status and cause, model, turns, tokens, cost (unknown stays
unknown), task head, and forks, delegations and successors arranged and rendered."""

from __future__ import annotations

from test_fold import read_fixture
from test_fold_support import Book, MemLedger, RunBuilder, rid, write_base_runs

from runfold.core.figures import usd as cost_text
from runfold.core.fold import render_tree, run_summaries, run_tree
from runfold.core.ids import short_run_ids
from runfold.core.records import Draft


def test_summaries_of_the_base_world() -> None:
    mem = MemLedger()
    runs = write_base_runs(Book(mem.append))
    by = {s.run: s for s in run_summaries(mem.records)}
    assert "00000000-0000-0000-0000-000000000000" not in by
    a, b, c, d, e = (by[runs[k].run] for k in "ABCDE")
    assert (a.status, a.turns, a.calls, a.model) == ("done", 4, 6, "m1")
    assert a.cost_usd_micros == 1500 + 3 * 1200 and a.tokens == {
        "input": 400,
        "output": 80,
        "cache_read": 200,
        "cache_write": 0,
    }
    assert b.cost_usd_micros is None and b.status == "done"  # one reply had no bill
    assert (c.status, c.cause) == ("cancelled", None)
    assert d.status == "limit" and d.tokens is None and d.model == "m1"
    assert (e.status, e.cause) == ("cancelled", "process_died")
    assert a.task_head == "fix the parser" and a.relation is None


def test_foreign_summary_and_unknowns() -> None:
    (s,) = run_summaries(read_fixture())
    assert (s.status, s.model, s.turns, s.task_head) == ("done", "script", 3, "walk two waves")
    assert s.cost_usd_micros is None and s.tokens is None
    assert (
        cost_text(None) == "unknown" and cost_text(1_234_567) == "$1.234567" and cost_text(0) == "$0"
    )


def test_tree_of_forks_delegations_and_successors() -> None:
    mem = MemLedger()
    book = Book(mem.append)
    root = RunBuilder(book, rid(1))
    root.start("root task\nsecond line", model="m1")
    root.turn(text="hi")
    root.end("done")

    def child(n: int, **links: str | int) -> None:
        data = {
            "task": f"child {n}",
            "goal": "",
            "skills": [],
            **{k: v for k, v in links.items() if k != "at"},
        }
        mem.append([Draft(rid(n), "runtime", "run_started", data)])
        if "at" in links:
            mem.append(
                [Draft(rid(n), "runtime", "run_forked", {"from": links["parent"], "at_seq": links["at"]})]
            )

    child(2, parent=rid(1), at=1)
    child(3, parent=rid(1))  # delegation
    child(4, parent=rid(2), at=mem.records[-3].seq)  # fork of the fork
    child(5, predecessor=rid(1), parent=rid(1), at=mem.records[0].seq)  # successor
    child(6, parent=rid(999))  # its origin is not in this ledger: a root
    roots = run_tree(run_summaries(mem.records))
    assert [r.summary.run for r in roots] == [rid(1), rid(6)]
    kids = roots[0].children
    assert [(k.summary.run, k.summary.relation) for k in kids] == [
        (rid(2), "fork"),
        (rid(3), "delegation"),
        (rid(5), "successor"),
    ]
    assert [g.summary.run for g in kids[0].children] == [rid(4)]
    lines = render_tree(roots)
    assert lines[0].startswith(rid(1)[:8]) and lines[0].endswith("root task")
    assert lines[1].startswith("├─ fork@1 " + rid(2)[:8])
    assert lines[2].startswith("│  └─ fork@")
    assert lines[3].startswith("├─ delegation " + rid(3)[:8])
    assert lines[4].startswith("└─ successor " + rid(5)[:8])
    names = short_run_ids([rid(n) for n in (1, 2, 3, 4, 5, 6, 999)])
    assert lines[5].startswith(names[rid(6)] + " ") and lines[5].endswith(
        f"(delegation of {names[rid(999)]}, not in this ledger)"
    )
    data = roots[0].to_data()
    assert [c["run"] for c in data["children"]] == [rid(2), rid(3), rid(5)]  # type: ignore[index]
