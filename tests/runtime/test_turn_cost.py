"""Per-turn cost does not grow with history: ledger bytes written per turn with 10 turns
of history and with 1,000 are within a small ratio, and the executor folds each line once (it never
re-folds the run per turn). A complexity check by counting bytes and folder feeds, not by timing.

The 1,000-turn history is written directly (a plain run of 1,000 one-tool turns) and continued by
the executor as a fork, so the test costs a few turns, not a thousand."""

from __future__ import annotations

from typing import Any

from rt_support import call, check_finished, run_lines, text

from runfold.api import Workspace
from runfold.core.ids import run_id_v7
from runfold.core.kinds import Kind
from runfold.core.payloads import PAYLOADS
from runfold.core.records import Draft, Record
from runfold.providers.scripted import ScriptedProvider

HISTORY = 1000


def note(n: int) -> dict[str, Any]:
    """Remember a number.

    Args:
        n: The number.
    """
    return {"n": n}


def per_turn_bytes(lines: list[Record]) -> list[int]:
    """Bytes (with newlines) of each turn: from a prompt_shape_compared to the next one, without
    the one-off prompt_assembled and the closing handoff/freeze."""
    turns: list[int] = []
    for rec in lines:
        if rec.kind_name == "prompt_shape_compared":
            turns.append(0)
        if turns and rec.kind_name not in ("prompt_assembled", "handoff_written", "run_frozen"):
            turns[-1] += len(rec.raw) + 1
    return turns


def script(prefix: str, turns: int, start: int) -> list[dict[str, Any]]:
    entries = [
        call(f"{prefix}{i}", "note", {"n": start + i}, usage={"input": 1000, "output": 20})
        for i in range(turns)
    ]
    return [*entries, text("finished", usage={"input": 1000, "output": 5})]


def write_history(ws: Workspace, turns: int) -> tuple[str, int]:
    """A finished-looking run of `turns` one-tool turns, written straight to the ledger; returns
    (run id, seq of its last tool_result: a safe cut point)."""
    run = run_id_v7(1_700_000_000_000, bytes(10))

    def d(kind: Kind, data: dict[str, Any], who: str = "agent") -> Draft:
        return Draft(run, who, kind.value, PAYLOADS[kind].from_data(data))

    drafts = [d(Kind.RUN_STARTED, {"task": "count to a thousand", "goal": "", "skills": []}, "person")]
    for i in range(turns):
        args = f'{{"n":{i}}}'
        drafts += [
            d(
                Kind.PROMPT_SHAPE_COMPARED,
                {"conversation": "extended", "messages": 2 * i + 1, "request_bytes": 0},
            ),
            d(Kind.MODEL_CALLED, {"model": "script", "request": {"hash": "0" * 64, "bytes": 0}}),
            d(
                Kind.MODEL_RETURNED,
                {
                    "message": {
                        "content": [{"kind": "tool_use", "id": f"h{i}", "name": "note", "input": args}]
                    },
                    "calls": 1,
                },
            ),
            d(Kind.TOOL_CALLED, {"id": f"h{i}", "name": "note", "args": args}),
            d(Kind.TOOL_RESULT, {"tool_use_id": f"h{i}", "name": "note", "result": {"n": i}}),
        ]
    with ws.writer() as ledger:
        recs = ledger.append(drafts)
    return run, recs[-1].seq


def test_ledger_bytes_per_turn_do_not_grow_with_history(ws: Workspace) -> None:
    fresh = ws.run("count", model=ScriptedProvider.of(script("f", 12, 0)), tools=[note], builtin_tools=False)
    assert fresh.completion == "done"
    check_finished(ws, fresh)
    early = per_turn_bytes(run_lines(ws, fresh.run_id))[1:11]  # turns 2..11: ~10 turns of history

    mother, cut = write_history(ws, HISTORY)
    child = ws.run(
        "",
        model=ScriptedProvider.of(script("c", 5, HISTORY)),
        tools=[note],
        builtin_tools=False,
        fork=(mother, cut),
    )
    assert child.completion == "done"
    child_lines = run_lines(ws, child.run_id)
    assert [r.kind_name for r in child_lines[-2:]] == ["handoff_written", "run_frozen"]
    assert ws.replay(child.run_id).ok  # folds the 5,001 inherited lines once more, renders 6 requests
    late = per_turn_bytes(child_lines)[1:5]  # after 1,000 turns of history

    assert len(early) == 10 and len(late) == 4
    ratio = max(late) / min(early)
    assert ratio < 1.15, (early, late)
    # each line folded once: the inherited lineage once, then one feed per line written
    assert fresh.folder_feeds == fresh.lines
    assert child.inherited_lines == 1 + HISTORY * 5
    assert child.folder_feeds == child.inherited_lines + child.lines
