"""`BareLedger` (a ledger directory or segment file read without its workspace) and `Ledger`
give the same view of the same lines through `LedgerView`."""

from __future__ import annotations

from pathlib import Path

from runfold.core.records import Draft
from runfold.store import LedgerView
from runfold.store.bare import BareLedger, is_bare_ledger, segment_first_seq
from runfold.store.ledger import Ledger

RUNS = ["0190f6a2-7c4a-7bbb-9d1e-000000000001", "0190f6a2-7c4a-7bbb-9d1e-000000000002"]


def _view(view: LedgerView) -> tuple[object, ...]:
    return (
        view.next_seq,
        view.head,
        view.runs(),
        list(view.records()),
        list(view.records(3)),
        view.run_records(RUNS[1]),
        view.run_records("0190f6a2-7c4a-7bbb-9d1e-00000000dead"),
        view.record_at(2),
    )


def test_a_bare_ledger_and_the_workspace_ledger_show_the_same_lines(tmp_path: Path) -> None:
    with Ledger.create(tmp_path, segment_bytes=600) as w:
        for i in range(6):
            w.append(
                [Draft(RUNS[i % 2], "lab/room1", "tool_result", {"text": f"line {i}"}, addr="lab/room1")]
            )
    ledger_dir = tmp_path / ".runfold" / "ledger"
    assert is_bare_ledger(ledger_dir) and not is_bare_ledger(tmp_path)
    with Ledger.open(tmp_path, writer=False) as r:
        views: list[LedgerView] = [r, BareLedger(ledger_dir)]
        assert _view(views[0]) == _view(views[1])
        assert views[0].segments() == views[1].segments()
        segments = r.segments()
    assert len(segments) > 1 and is_bare_ledger(segments[-1])
    lone = BareLedger(segments[-1])  # starts mid-chain: checked from its first line's seq and prev
    first = segment_first_seq(segments[-1], -1)
    assert first > 0 and lone.first_seq == first and lone.next_seq == 7
    assert lone.record_at(first).seq == first and [r.seq for r in lone.records()] == list(range(first, 7))
    assert segment_first_seq(tmp_path / "not-a-segment.jsonl", 5) == 5
