"""The hazards of real session files. Each test names the naive reading it guards against and
asserts the fact that reading gets wrong."""

from __future__ import annotations

import json
from pathlib import Path

from import_support import FIXTURES

from runfold.api import Workspace
from runfold.importers import Reply, Result, Text, read_plan

CC = FIXTURES / "claude-code-coverage-fix.jsonl"
HELLO = FIXTURES / "claude-code-hello-world.jsonl"


def _plan(raw: bytes, fmt: str, name: str = "s.jsonl"):  # type: ignore[no-untyped-def]
    return read_plan(fmt, raw, name)


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _dump(rows: list[dict]) -> bytes:  # type: ignore[type-arg]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_claude_code_reply_spread_over_lines_is_one_reply_with_usage_counted_once() -> None:
    """Naive: one reply per assistant line (two replies for lines 6-7) and usage summed per line."""
    (session,) = _plan(CC.read_bytes(), "claude-code").sessions
    replies = [e for e in session.events if isinstance(e, Reply)]
    (merged,) = [r for r in replies if r.origin == ("line 6", "line 7")]
    assert len(merged.calls) == 2
    outs = [row["message"]["usage"]["output_tokens"] for row in _rows(CC)[5:7]]
    assert merged.usage is not None and merged.usage["output"] == max(outs) != sum(outs)


def test_claude_code_parallel_wave_results_off_the_leaf_chain_are_kept() -> None:
    """Naive: walk only the leaf's parentUuid chain — it skips line 8, the result of the first
    call of the wave at lines 6-7 (line 9 hangs off line 7, and line 10 off line 9)."""
    (session,) = _plan(CC.read_bytes(), "claude-code").sessions
    results = [e for e in session.events if isinstance(e, Result)]
    assert ("line 8",) in [r.origin for r in results]
    rows = _rows(CC)
    chain, uuid = set(), rows[-1]["uuid"]
    by = {r["uuid"]: i + 1 for i, r in enumerate(rows) if r.get("uuid")}  # rows without one end no chain
    while uuid in by and by[uuid] not in chain:
        chain.add(by[uuid])
        uuid = rows[by[uuid] - 1].get("parentUuid")
    assert 8 not in chain  # the naive walk really misses it


def test_claude_code_parent_never_written_continues_from_the_line_before() -> None:
    """Naive: stop the chain at a parentUuid that names no line, losing everything before it."""
    rows = _rows(HELLO)
    rows[4]["parentUuid"] = "00000000-dead-beef-0000-000000000000"
    (session,) = _plan(_dump(rows), "claude-code").sessions
    assert sum(isinstance(e, Reply) for e in session.events) == 4
    assert sum(isinstance(e, Result) for e in session.events) == 2


def test_claude_code_is_meta_lines_are_runtime_text(tmp_path: Path) -> None:
    """Naive: every user line with text is the person speaking (the stop-hook output at line 8)."""
    ws = Workspace.init(tmp_path / "ws")
    (run,) = [r.run for r in ws.import_session(HELLO).runs]
    steers = [r.env for r in ws.records(run=run) if r.kind_name == "steer_received"]
    hook = [e for e in steers if "Stop hook" in e.data["text"] or e.data["source"] == "runtime"]
    assert hook and all(e.data["source"] == "runtime" and e.who == "runtime" for e in hook)
    meta_text = next(r["message"]["content"] for r in _rows(HELLO) if r.get("isMeta"))
    assert any(e.data["text"] == meta_text and e.data["source"] == "runtime" for e in steers)


def test_claude_code_rows_re_appended_by_a_compaction_are_kept_once() -> None:
    """Naive: every line is new — rows a second compaction re-appends with their original uuids
    would repeat replies (and a tool_use id, which providers refuse)."""
    rows = _rows(HELLO)
    again = [*rows, dict(rows[2]), dict(rows[3])]
    plan = _plan(_dump(again), "claude-code")
    assert sum(isinstance(e, Reply) for e in plan.sessions[0].events) == 4
    assert ("line 10", "re-appended copy of line 3 (same uuid)") in plan.skipped


def test_claude_code_compact_summary_is_the_runtimes_not_the_persons() -> None:
    """Naive: an `isCompactSummary` user line is the person's words."""
    rows = _rows(HELLO)
    boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "uuid": "b-1",
        "parentUuid": None,
        "logicalParentUuid": rows[-1]["uuid"],
        "sessionId": rows[1]["sessionId"],
        "content": "Conversation compacted",
    }
    summary = {
        "type": "user",
        "uuid": "s-1",
        "parentUuid": "b-1",
        "isCompactSummary": True,
        "sessionId": rows[1]["sessionId"],
        "message": {
            "role": "user",
            "content": "This session is being continued from a previous conversation.",
        },
    }
    (session,) = _plan(_dump([*rows, boundary, summary]), "claude-code").sessions
    last = session.events[-1]
    assert isinstance(last, Text) and last.speaker == "runtime"
    assert sum(isinstance(e, Reply) for e in session.events) == 4  # the history before it is kept


def _codex(lines: list[dict]) -> bytes:  # type: ignore[type-arg]
    return _dump([{"timestamp": "2025-12-28T12:00:00.000Z", **x} for x in lines])


CODEX = [
    {"type": "session_meta", "payload": {"id": "s1", "cli_version": "0.77.0", "forked_from_id": "s0"}},
    {"type": "turn_context", "payload": {"model": "gpt-5.2-codex"}},
    {
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}],
        },
    },
    {
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "list files"}],
        },
    },
    {"type": "event_msg", "payload": {"type": "user_message", "message": "list files"}},
    {
        "type": "response_item",
        "payload": {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "I should run ls"}],
            "encrypted_content": "gAAA",
        },
    },
    {
        "type": "response_item",
        "payload": {
            "type": "function_call",
            "name": "shell",
            "arguments": '{"command":["ls"]}',
            "call_id": "call_1",
        },
    },
    {
        "type": "event_msg",
        "payload": {
            "type": "token_count",
            "info": {
                "total_token_usage": {"input_tokens": 900, "cached_input_tokens": 100, "output_tokens": 50},
                "last_token_usage": {"input_tokens": 300, "cached_input_tokens": 100, "output_tokens": 20},
            },
        },
    },
    {
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
    },
    {"type": "event_msg", "payload": {"type": "agent_message", "message": "There is one file."}},
    {
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "There is one file."}],
        },
    },
]


def test_codex_assistant_message_appears_twice_and_is_used_once() -> None:
    """Naive: read both the `event_msg` agent_message and the `response_item` message (two replies)."""
    (session,) = _plan(_codex(CODEX), "codex").sessions
    replies = [e for e in session.events if isinstance(e, Reply)]
    assert len(replies) == 2 and replies[1].blocks == ({"kind": "text", "text": "There is one file."},)


def test_codex_usage_is_last_token_usage_not_the_cumulative_total() -> None:
    """Naive: take `total_token_usage` (cumulative over the session) as the turn's usage."""
    (session,) = _plan(_codex(CODEX), "codex").sessions
    first = next(e for e in session.events if isinstance(e, Reply))
    assert first.usage == {"input": 200, "output": 20, "cache_read": 100, "cache_write": 0}


def test_codex_reasoning_stays_with_its_reply_and_injected_text_is_runtime() -> None:
    """Naive: a reasoning item is a reply of its own; every user message is the person's."""
    plan = _plan(_codex(CODEX), "codex")
    (session,) = plan.sessions
    first = next(e for e in session.events if isinstance(e, Reply))
    assert [b["kind"] for b in first.blocks] == ["thinking", "tool_use"]
    texts = [e for e in session.events if isinstance(e, Text)]
    assert [(t.speaker, t.text) for t in texts] == [
        ("runtime", "<environment_context>cwd</environment_context>"),
        ("person", "list files"),
    ]
    assert session.facts["forked_from_id"] == "s0"


def test_codex_older_layout_reads_the_same() -> None:
    """Naive: require `{timestamp, type, payload}` on every line (the older layout has bare items)."""
    old = [
        {"id": "s1", "timestamp": "2025-05-01T00:00:00Z", "instructions": None},
        {"record_type": "state"},
        *[x["payload"] for x in CODEX if x["type"] == "response_item"],
    ]
    (session,) = _plan(_dump(old), "codex").sessions
    assert sum(isinstance(e, Reply) for e in session.events) == 2
    assert sum(isinstance(e, Result) for e in session.events) == 1


def test_openai_chat_ids_reused_in_a_later_turn_are_rekeyed_for_anthropic(tmp_path: Path) -> None:
    """Naive: copy ids as they are — task 13 reuses two ids in later turns; Anthropic refuses a
    request with a repeated tool_use id, and the conversation would refuse the second use."""
    ws = Workspace.init(tmp_path / "ws")
    report = ws.import_session(FIXTURES / "tau-bench-gpt4o-airline-4.json")
    task13 = next(r for r in report.runs if r.session == "task 13")
    assert task13.rekeyed == 2
    ids = [r.env.data["id"] for r in ws.records(run=task13.run) if r.kind_name == "tool_called"]
    assert len(ids) == len(set(ids)) and "call_dhYivf6VRUVJfU9DItC2EQ95-2" in ids
    assert ws.request_at(task13.run, dialect="anthropic").verdicts["anthropic"] == []


def test_openai_chat_tool_calls_with_null_content_are_tool_only_replies() -> None:
    """Naive: `content: null` becomes an empty text block (providers refuse empty text)."""
    raw = json.dumps(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ]
    ).encode()
    (session,) = _plan(raw, "openai-chat").sessions
    first = next(e for e in session.events if isinstance(e, Reply))
    assert [b["kind"] for b in first.blocks] == ["tool_use"]


def test_swe_agent_uses_history_not_the_last_steps_query() -> None:
    """Naive: take the last trajectory step's `query` (1.1.0; `messages` before) as the run —
    history processors elided older observations there."""
    traj = json.loads((FIXTURES / "swe-agent-function-calling-simple.traj").read_text())
    history = traj["history"]
    elided = [
        dict(m, content="Old environment output: (5 lines omitted)") if m["role"] == "tool" else m
        for m in history[:6]
    ]
    traj["trajectory"] = [
        {"action": "submit", "query": elided, "observation": "", "response": "", "thought": ""}
    ]
    traj["info"] = {"swe_agent_version": "1.1.0"}
    (session,) = _plan(json.dumps(traj).encode(), "swe-agent", "x.traj").sessions
    results = [e for e in session.events if isinstance(e, Result)]
    assert len(results) == 5 and not any("omitted" in r.content for r in results)


def test_swe_agent_tool_call_ids_list_answers_the_call() -> None:
    """Naive: read `tool_call_id` (absent here: SWE-agent writes a `tool_call_ids` list)."""
    (session,) = _plan(
        (FIXTURES / "swe-agent-function-calling-simple.traj").read_bytes(), "swe-agent", "x.traj"
    ).sessions
    results = [e for e in session.events if isinstance(e, Result)]
    assert next(r.call_id for r in results) == "call_PbWErNIge3YTrli3fiVvmIid"


def test_openhands_cause_pairs_and_parallel_calls_share_one_reply(tmp_path: Path) -> None:
    """Naive: one reply per action (two for the actions of one model response) and results paired
    by position instead of `cause`."""
    (session,) = _plan((FIXTURES / "openhands-fix-add.json").read_bytes(), "openhands", "oh.json").sessions
    replies = [e for e in session.events if isinstance(e, Reply)]
    two = next(r for r in replies if len(r.calls) == 2)
    assert [c["id"] for c in two.calls] == ["toolu_02", "toolu_03"]
    results = [e for e in session.events if isinstance(e, Result)]
    assert [r.call_id for r in results] == ["toolu_01", "toolu_02", "toolu_03", "toolu_04"]


def test_openhands_condensation_is_runtime_text_and_finish_is_closed_like_a_lost_call(tmp_path: Path) -> None:
    """Naive: a condensation is an ordinary step (its summary lost or the person's), and a
    `finish` call without an observation is left open (a tool_use providers refuse)."""
    plan = _plan((FIXTURES / "openhands-fix-add.json").read_bytes(), "openhands", "oh.json")
    (session,) = plan.sessions
    summary = next(e for e in session.events if isinstance(e, Text) and e.text.startswith("USER_CONTEXT"))
    assert summary.speaker == "runtime" and session.facts["forgotten_event_ids"] == "5,6"
    ws = Workspace.init(tmp_path / "ws")
    (run,) = ws.import_session(FIXTURES / "openhands-fix-add.json").runs
    assert run.lost == 1
    last_result = [r for r in ws.records(run=run.run) if r.kind_name == "tool_result"][-1]
    assert last_result.env.data["name"] == "finish"
    assert last_result.env.data["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
