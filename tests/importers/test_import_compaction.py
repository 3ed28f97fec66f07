"""A compaction the source runtime made (Claude Code's `compact_boundary` + `isCompactSummary`,
OpenHands' `condensation`) becomes the conversation `context_changed` a native compaction writes:
the window after it is the one the source's model saw (checked against the source file read
here, independently of the importer), `why` names the compaction, forks on either side of it
validate in every dialect, and every earlier line stays in the ledger."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from import_support import FIXTURES

from runfold.api import Workspace
from runfold.core.compaction import SUMMARY, Change, apply_change
from runfold.core.conversation import BlockSource, Conversation
from runfold.core.errors import RunfoldError
from runfold.core.fold import fold_run, group_by_run, safe_points
from runfold.core.kinds import Kind
from runfold.importers import import_drafts, read_plan
from runfold.store.staging import Stager

HELLO = FIXTURES / "claude-code-hello-world.jsonl"
OPENHANDS = FIXTURES / "openhands-fix-add.json"
DIALECTS = {"anthropic": [], "openai-chat": [], "openai-responses": []}
LABEL = re.compile(r"^(runtime|user): ", re.MULTILINE)


def _compacted_session(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The hello-world session, then a compaction, a new turn with a tool call, and a second
    compaction that (as Claude Code does) first re-appends the older rows with their uuids."""
    rows = [json.loads(x) for x in HELLO.read_text().splitlines() if x.strip()]
    sid = rows[1]["sessionId"]

    def user(uuid: str, parent: str, content: Any, **more: Any) -> dict[str, Any]:
        return {"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": sid,
                "message": {"role": "user", "content": content}, **more}  # fmt: skip

    def reply(uuid: str, parent: str, mid: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": sid,
                "message": {"id": mid, "model": "claude-opus-4-5-20251101", "role": "assistant",
                            "content": content, "usage": {"input_tokens": 5, "output_tokens": 3}}}  # fmt: skip

    def boundary(uuid: str, logical: str) -> dict[str, Any]:
        return {"type": "system", "subtype": "compact_boundary", "uuid": uuid, "parentUuid": None,
                "logicalParentUuid": logical, "sessionId": sid, "content": "Conversation compacted",
                "compactMetadata": {"trigger": "manual", "preTokens": 1000}}  # fmt: skip

    call = {
        "type": "tool_use",
        "id": "toolu_X",
        "name": "Bash",
        "input": {"command": "./hello.sh; ./hello.sh"},
    }
    out = [
        *rows,
        boundary("b-1", rows[-1]["uuid"]),
        user(
            "s-1",
            "b-1",
            "This session is being continued. Summary one: hello.sh exists.",
            isCompactSummary=True,
        ),
        user("p-2", "s-1", "Now print it twice."),
        reply("a-2", "p-2", "msg_x2", [call]),
        user(
            "r-2",
            "a-2",
            [{"type": "tool_result", "tool_use_id": "toolu_X", "content": "Hello world\nHello world"}],
        ),
        reply("a-3", "r-2", "msg_x3", [{"type": "text", "text": "Printed twice."}]),
        *[dict(r) for r in rows[1:9]],  # the re-appended copies (same uuids)
        boundary("b-2", "a-3"),
        user("s-2", "b-2", "Summary two: printed it twice.", isCompactSummary=True),
        user("p-3", "s-2", "Thanks, one last check?"),
        reply("a-4", "p-3", "msg_x4", [{"type": "text", "text": "All good."}]),
    ]
    path = tmp_path / "compacted.jsonl"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in out))
    return path, out


def _source_window(
    rows: list[dict[str, Any]], summary_uuid: str, stop: str | None = None
) -> list[tuple[str, list[Any]]]:
    """What Claude Code's model saw after the summary line `summary_uuid` (through the row
    `stop`): the summary, then the message rows after it, one message per role run."""
    start = next(i for i, r in enumerate(rows) if r.get("uuid") == summary_uuid)
    out: list[tuple[str, list[Any]]] = []
    for r in rows[start:]:
        if r.get("type") not in ("user", "assistant"):
            continue
        content = r["message"]["content"]
        blocks = [("text", content)] if isinstance(content, str) else [
            ("text", b["text"]) if b["type"] == "text"
            else ("tool_use", b["id"]) if b["type"] == "tool_use"
            else ("tool_result", b["tool_use_id"])
            for b in content
        ]  # fmt: skip
        if out and out[-1][0] == r["type"]:
            out[-1][1].extend(blocks)
        else:
            out.append((r["type"], blocks))
        if r.get("uuid") == stop:
            break
    return out


def _window(body: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """An Anthropic request body's messages in the terms of `_source_window` (speaker labels off)."""
    out = []
    for m in body["messages"]:
        blocks = [
            ("text", LABEL.sub("", b["text"])) if b["type"] == "text"
            else ("tool_use", b["id"]) if b["type"] == "tool_use"
            else ("tool_result", b["tool_use_id"])
            for b in m["content"]
        ]  # fmt: skip
        out.append((m["role"], blocks))
    return out


def _imported(tmp_path: Path, path: Path) -> tuple[Workspace, str]:
    ws = Workspace.init(tmp_path / "ws")
    (run,) = ws.import_session(path).runs
    return ws, run.run


def _compactions(ws: Workspace, run: str) -> list[int]:
    return [r.seq for r in ws.records(run=run) if r.kind is Kind.CONTEXT_CHANGED]


def test_claude_code_window_after_each_compaction_is_what_the_model_saw(tmp_path: Path) -> None:
    """Naive: the summary is one more runtime text and the history before it stays in the window."""
    path, rows = _compacted_session(tmp_path)
    ws, run = _imported(tmp_path, path)
    first, second = _compactions(ws, run)
    assert _window(ws.request_at(run).body) == _source_window(rows, "s-2")
    reply_a3 = max(r.seq for r in ws.records(run=run) if r.kind is Kind.MODEL_RETURNED and r.seq < second)
    assert _window(ws.request_at(run, at=reply_a3).body) == _source_window(rows, "s-1", stop="a-3")
    # nothing is dropped from the ledger: every earlier call and result is still a line
    ids = [r.env.data["id"] for r in ws.records(run=run) if r.kind is Kind.TOOL_CALLED]
    assert ids == ["toolu_01R3SZZYuAq6mou5RqHE4rzF", "toolu_01GNvoSEyj9jAsgFtJBduDPp", "toolu_X"]
    data = ws.records(run=run)[first - ws.records(run=run)[0].seq].env.data
    assert (data["cause"], data["strategy"], data["imported"], data["keep_opening"]) == (
        "compaction",
        SUMMARY,
        True,
        False,
    )
    assert ws.verify().lines > 0
    # every source line is mapped: the boundary and summary lines to the compaction's seq
    from runfold.core.locator import CasLocator, parse_locator
    from runfold.store.cas import Cas

    loc = parse_locator(ws.records(run=run)[1].env.data["map"])
    assert isinstance(loc, CasLocator)
    doc = json.loads(Cas(ws.root).get_locator(loc))
    mapped = {row["at"] for row in doc["rows"]} | {s["at"] for s in doc["skipped"]}
    assert mapped == {f"line {i}" for i in range(1, len(rows) + 1)}
    boundary = next(i for i, r in enumerate(rows, 1) if r.get("uuid") == "b-1")
    assert [
        row["seqs"] for row in doc["rows"] if row["at"] in (f"line {boundary}", f"line {boundary + 1}")
    ] == [
        [first],
        [first],
    ]


def test_why_names_the_compaction_at_its_seq(tmp_path: Path) -> None:
    path, _ = _compacted_session(tmp_path)
    ws, run = _imported(tmp_path, path)
    _, second = _compactions(ws, run)
    report = ws.why(run)
    summary = [p for p in report.parts if p.region == "conversation" and p.cause == "compaction"]
    assert [p.seq for p in summary] == [second]
    assert any(c.seq == second and c.cause == "compaction" and c.bytes < 0 for c in report.changes)


def test_forks_before_and_after_each_compaction_validate(tmp_path: Path) -> None:
    """A fork before a compaction inherits the originals; one after it, the summary only."""
    path, _ = _compacted_session(tmp_path)
    ws, run = _imported(tmp_path, path)
    first, second = _compactions(ws, run)
    points = safe_points({run: ws.records(run=run)}, run)
    assert any(p < first for p in points) and any(first <= p < second for p in points) and points[-1] > second
    answered = next(r.seq for r in ws.records(run=run) if r.kind is Kind.TOOL_RESULT)
    for at in points:
        new = ws.fork(run, at).new_run
        view = ws.request_at(new)
        assert view.verdicts == DIALECTS, at
        text = json.dumps(view.body)
        assert ("toolu_01R3SZZYuAq6mou5RqHE4rzF" in text) == (answered <= at < first), at
        assert ("Summary one" in text) == (first <= at < second), at
    assert ws.verify().lines > 0


def test_continue_after_a_compaction_sends_the_compacted_window(tmp_path: Path) -> None:
    path, _ = _compacted_session(tmp_path)
    ws, run = _imported(tmp_path, path)
    script = tmp_path / "reply.jsonl"
    script.write_text('{"content":[{"kind":"text","text":"Continuing."}],"usage":{"input":10,"output":2}}\n')
    outcome = ws.continue_run(run, model=f"script:{script}#anthropic", builtin_tools=False)
    assert outcome.completion == "done", outcome
    text = json.dumps(ws.request_at(outcome.run_id).body)
    assert "Summary two" in text and "Summary one" not in text
    assert "toolu_X" not in text and "toolu_01R3SZZYuAq6mou5RqHE4rzF" not in text
    assert ws.verify().lines > 0


def test_openhands_condensation_forgets_exactly_its_events(tmp_path: Path) -> None:
    """Naive: the condensation is an ordinary step, and the forgotten events stay in the window."""
    ws, run = _imported(tmp_path, OPENHANDS)
    (seq,) = _compactions(ws, run)
    events = json.loads(OPENHANDS.read_text())
    gone = {i for e in events if e.get("action") == "condensation" for i in e["args"]["forgotten_event_ids"]}
    summary = next(e["args"]["summary"] for e in events if e.get("action") == "condensation")
    calls = [
        e["tool_call_metadata"]["tool_call_id"] for e in events if "tool_call_metadata" in e and "action" in e
    ]
    call_of = {
        e["id"]: e["tool_call_metadata"]["tool_call_id"]
        for e in events
        if "tool_call_metadata" in e and "action" in e
    }
    kept_calls = [c for e, c in call_of.items() if e not in gone]
    answered = [
        call_of[e["cause"]]
        for e in events
        if "observation" in e and e.get("cause") in call_of and e["id"] not in gone
    ]
    view = ws.request_at(run)
    assert view.verdicts == DIALECTS
    window = _window(view.body)
    assert [b for _, bs in window for k, b in bs if k == "tool_use"] == kept_calls
    assert [b for _, bs in window for k, b in bs if k == "tool_result"] == [
        *answered,
        calls[-1],
    ]  # finish: lost
    assert window[0][1][-1] == ("text", summary)  # message 0 keeps the first events, then the summary
    assert "Fix add() in app.py: the tests fail." in [t for k, t in window[0][1] if k == "text"]
    assert [p.seq for p in ws.why(run).parts if p.cause == "compaction"] == [seq]
    for at in safe_points({run: ws.records(run=run)}, run):
        assert ws.request_at(ws.fork(run, at).new_run).verdicts == DIALECTS, at


def _conv() -> Conversation:
    conv = Conversation()
    conv.open_with("task", BlockSource(1, "seed"))
    conv.mark_sent()
    conv.add_reply([{"kind": "text", "text": "done"}], BlockSource(2, "model_reply"))
    return conv


def test_an_imported_compaction_may_replace_the_whole_window_a_native_one_may_not() -> None:
    conv = _conv()  # ends on a reply without calls: a turn boundary for an imported compaction
    whole = Change(SUMMARY, through=2, summary="s", imported=True, keep_opening=False)
    after = apply_change(conv, whole, 3)
    assert after.messages == [{"role": "user", "content": [{"kind": "text", "text": "runtime: s"}]}]
    with pytest.raises(RunfoldError, match="turn boundary"):
        apply_change(conv, Change(SUMMARY, through=2, summary="s"), 3)
    with pytest.raises(RunfoldError, match="keep_opening"):
        Change.of({"strategy": SUMMARY, "through": 3, "summary": "s", "keep_opening": False})
    assert (
        Change.of(
            {"strategy": SUMMARY, "through": 2, "summary": "s", "imported": True, "keep_opening": False}
        )
        == whole
    )


# ---- property: any session with compactions between its turns ------------------------------

RUN = "01890000-0000-7000-8000-000000000001"


def _session_rows(turns: list[tuple[int, bool]]) -> list[dict[str, Any]]:
    """A linear Claude Code session: per turn a prompt, a reply with `calls` tool calls (each
    answered on its own line), a closing reply; a compaction before the turn when flagged."""
    rows: list[dict[str, Any]] = []
    parent: str | None = None

    def add(row: dict[str, Any]) -> None:
        nonlocal parent
        n = len(rows)
        row.setdefault("uuid", f"u-{n}")
        row.setdefault("parentUuid", parent)
        rows.append({"sessionId": "s", **row})
        parent = row["uuid"]

    for t, (calls, compact) in enumerate(turns):
        if compact:
            add(
                {
                    "type": "system",
                    "subtype": "compact_boundary",
                    "parentUuid": None,
                    "logicalParentUuid": parent,
                }
            )
            add(
                {
                    "type": "user",
                    "isCompactSummary": True,
                    "message": {"role": "user", "content": f"summary {t}"},
                }
            )
        add({"type": "user", "message": {"role": "user", "content": f"prompt {t}"}})
        ids = [f"toolu_{t}_{k}" for k in range(calls)]
        if ids:
            add({"type": "assistant", "message": {"id": f"m{t}a", "model": "m", "role": "assistant",
                 "content": [{"type": "tool_use", "id": i, "name": "Bash", "input": {}} for i in ids]}})  # fmt: skip
            for i in ids:
                add({"type": "user", "message": {"role": "user",
                     "content": [{"type": "tool_result", "tool_use_id": i, "content": f"out {i}"}]}})  # fmt: skip
        add({"type": "assistant", "message": {"id": f"m{t}b", "model": "m", "role": "assistant",
             "content": [{"type": "text", "text": f"answer {t}"}]}})  # fmt: skip
    return rows


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=6))
def test_the_folded_window_is_the_one_after_the_last_compaction(turns: list[tuple[int, bool]]) -> None:
    """For any session with compactions between its turns, the folded conversation is the
    window after the last summary (or the whole session when there is none), read from the
    rows directly."""
    rows = _session_rows(turns)
    raw = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
    plan = read_plan("claude-code", raw, "p.jsonl")
    made = import_drafts(
        plan, run_ids=[RUN], first_seq=1, source_hash="b3-" + "0" * 64, source_bytes=len(raw)
    )
    records = Stager().stage(list(made.drafts), 1, "0" * 64, 0)
    conv = fold_run(group_by_run(records), RUN).conversation
    body: dict[str, Any] = {"messages": []}
    for m in conv.messages:
        blocks = []
        for b in m["content"]:
            if b["kind"] == "text":
                blocks.append({"type": "text", "text": b["text"]})
            elif b["kind"] == "tool_use":
                blocks.append({"type": "tool_use", "id": b["id"]})
            else:
                blocks.append({"type": "tool_result", "tool_use_id": b["tool_use_id"]})
        body["messages"].append({"role": m["role"], "content": blocks})
    summaries = [r["uuid"] for r in rows if r.get("isCompactSummary")]
    want = _source_window(rows, summaries[-1]) if summaries else _source_window(rows, rows[0]["uuid"])
    assert _window(body) == want
    assert len([d for d in made.drafts if d.kind == "tool_called"]) == sum(c for c, _ in turns)
