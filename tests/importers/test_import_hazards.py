"""The hazards of real session files. Each test runs a small, explicit naive reading of the
source (the `naive_*` functions here: what a quick importer would do), shows it gets the wrong
answer, and shows the importer gets the right one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from import_support import FIXTURES

from runfold.api import Workspace
from runfold.core.errors import RunfoldError
from runfold.importers import Compaction, Reply, Result, Text, read_plan

CC = FIXTURES / "claude-code-coverage-fix.jsonl"
HELLO = FIXTURES / "claude-code-hello-world.jsonl"
OPENHANDS = FIXTURES / "openhands-fix-add.json"
SWE = FIXTURES / "swe-agent-function-calling-simple.traj"
TAU = FIXTURES / "tau-bench-gpt4o-airline-4.json"
ALL_VALID = {"anthropic": [], "openai-chat": [], "openai-responses": []}

Row = dict[str, Any]


def _plan(raw: bytes, fmt: str, name: str = "s.jsonl"):  # type: ignore[no-untyped-def]
    return read_plan(fmt, raw, name)


def _rows(path: Path) -> list[Row]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _dump(rows: list[Row]) -> bytes:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()


def _events(raw: bytes, fmt: str, name: str = "s.jsonl") -> tuple[Any, ...]:
    (session,) = _plan(raw, fmt, name).sessions
    return tuple(session.events)


def _replies(events: tuple[Any, ...]) -> list[Reply]:
    return [e for e in events if isinstance(e, Reply)]


def _results(events: tuple[Any, ...]) -> list[Result]:
    return [e for e in events if isinstance(e, Result)]


# ---- Claude Code ---------------------------------------------------------------------------


def naive_cc_replies(rows: list[Row]) -> list[Row]:
    """Naive: every assistant line is one reply, its usage counted as it stands."""
    return [r for r in rows if r.get("type") == "assistant"]


def naive_leaf_chain(rows: list[Row]) -> list[int]:
    """Naive: the conversation is the last line's `parentUuid` chain (1-based line numbers,
    oldest first); a parent that names no line ends it."""
    by = {r["uuid"]: i + 1 for i, r in enumerate(rows) if r.get("uuid")}
    chain: list[int] = []
    uuid = rows[-1].get("uuid")
    while uuid in by and by[uuid] not in chain:
        chain.append(by[uuid])
        uuid = rows[by[uuid] - 1].get("parentUuid")
    return chain[::-1]


def naive_cc_person_texts(rows: list[Row]) -> list[str]:
    """Naive: every user line whose content is text is the person speaking."""
    return [
        r["message"]["content"]
        for r in rows
        if r.get("type") == "user" and isinstance(r["message"]["content"], str)
    ]


def naive_cc_tool_ids(rows: list[Row]) -> list[str]:
    """Naive: every line is new: each assistant line's tool_use ids, in file order."""
    return [
        b["id"]
        for r in naive_cc_replies(rows)
        for b in r["message"]["content"]
        if b.get("type") == "tool_use"
    ]


def test_claude_code_reply_spread_over_lines_is_one_reply_with_usage_counted_once() -> None:
    """Guards against `naive_cc_replies`: lines 6-7 share a message.id (one API reply); counting
    them as two replies and summing their streamed usage snapshots overcounts."""
    rows = _rows(CC)
    naive = naive_cc_replies(rows)
    per_id: dict[str, int] = {}
    for r in naive:
        per_id[r["message"]["id"]] = max(
            per_id.get(r["message"]["id"], 0), r["message"]["usage"]["output_tokens"]
        )
    naive_output = sum(r["message"]["usage"]["output_tokens"] for r in naive)
    replies = _replies(_events(CC.read_bytes(), "claude-code"))
    assert len(naive) > len(replies) == len(per_id)
    got = sum(r.usage["output"] for r in replies if r.usage)
    assert got == sum(per_id.values()) != naive_output
    (merged,) = [r for r in replies if r.origin == ("line 6", "line 7")]
    assert len(merged.calls) == 2


def test_claude_code_parallel_wave_results_off_the_leaf_chain_are_kept() -> None:
    """Guards against `naive_leaf_chain`: it misses line 8, the result of the first call of the
    wave at lines 6-7 (line 9 hangs off line 7, and line 10 off line 9)."""
    rows = _rows(CC)
    assert 8 not in naive_leaf_chain(rows)
    assert ("line 8",) in [r.origin for r in _results(_events(CC.read_bytes(), "claude-code"))]


def test_claude_code_parent_never_written_continues_from_the_line_before() -> None:
    """Guards against `naive_leaf_chain` stopping at a parentUuid that names no line: it loses
    everything before it."""
    rows = _rows(HELLO)
    rows[4]["parentUuid"] = "00000000-dead-beef-0000-000000000000"
    naive = [n for n in naive_leaf_chain(rows) if rows[n - 1].get("type") == "assistant"]
    events = _events(_dump(rows), "claude-code")
    assert len(naive) == 3 and len(_replies(events)) == 4
    assert len(_results(events)) == 2


def test_claude_code_is_meta_lines_are_runtime_text(tmp_path: Path) -> None:
    """Guards against `naive_cc_person_texts`: the stop-hook output at line 8 (`isMeta`) would be
    the person's words."""
    rows = _rows(HELLO)
    meta_text = next(r["message"]["content"] for r in rows if r.get("isMeta"))
    assert meta_text in naive_cc_person_texts(rows)
    ws = Workspace.init(tmp_path / "ws")
    (run,) = [r.run for r in ws.import_session(HELLO).runs]
    steers = [r.env for r in ws.records(run=run) if r.kind_name == "steer_received"]
    (hook,) = [e for e in steers if e.data["text"] == meta_text]
    assert hook.data["source"] == "runtime" and hook.who == "runtime"
    assert all(e.data["text"] != meta_text for e in steers if e.data["source"] == "user")


def test_claude_code_rows_re_appended_by_a_compaction_are_kept_once() -> None:
    """Guards against `naive_cc_tool_ids` (every line new): rows a second compaction re-appends
    with their original uuids repeat replies and a tool_use id, which providers refuse."""
    rows = _rows(HELLO)
    again = [*rows, dict(rows[2]), dict(rows[3])]
    naive = naive_cc_tool_ids(again)
    assert len(naive) != len(set(naive))
    plan = _plan(_dump(again), "claude-code")
    calls = [c["id"] for r in _replies(plan.sessions[0].events) for c in r.calls]
    assert len(calls) == len(set(calls)) == 2
    assert ("line 10", "re-appended copy of line 3 (same uuid)") in plan.skipped


def _compacted(rows: list[Row]) -> list[Row]:
    sid = rows[1]["sessionId"]
    return [
        *rows,
        {"type": "system", "subtype": "compact_boundary", "uuid": "b-1", "parentUuid": None,
         "logicalParentUuid": rows[-1]["uuid"], "sessionId": sid, "content": "Conversation compacted"},
        {"type": "user", "uuid": "s-1", "parentUuid": "b-1", "isCompactSummary": True, "sessionId": sid,
         "message": {"role": "user", "content": "This session is being continued. hello.sh is written."}},
        {"type": "user", "uuid": "p-1", "parentUuid": "s-1", "sessionId": sid,
         "message": {"role": "user", "content": "Is it executable?"}},
    ]  # fmt: skip


def test_claude_code_compaction_replaces_the_window_with_the_runtimes_summary(tmp_path: Path) -> None:
    """Guards against `naive_cc_person_texts` plus keeping every earlier line in the window: the
    `isCompactSummary` line would be the person's words and the model would be sent the tool
    calls the compaction took out of its window."""
    rows = _compacted(_rows(HELLO))
    summary = rows[-2]["message"]["content"]
    assert summary in naive_cc_person_texts(rows) and naive_cc_tool_ids(rows)
    events = _events(_dump(rows), "claude-code")
    assert isinstance(events[-2], Compaction) and events[-2].forgotten is None
    assert not [e for e in events if isinstance(e, Text) and e.text == summary]
    path = tmp_path / "s.jsonl"
    path.write_bytes(_dump(rows))
    ws = Workspace.init(tmp_path / "ws")
    (run,) = ws.import_session(path).runs
    view = ws.request_at(run.run)
    assert view.verdicts == ALL_VALID
    assert [m["role"] for m in view.body["messages"]] == ["user"]
    text = json.dumps(view.body)
    assert summary in text and not any(i in text for i in naive_cc_tool_ids(rows))
    assert (
        len([r for r in ws.records(run=run.run) if r.kind_name == "tool_called"]) == 2
    )  # the ledger keeps them


def naive_cc_main(rows: list[Row]) -> list[Row]:
    """Naive: every message line of the file belongs to the one conversation."""
    return [r for r in rows if r.get("type") in ("user", "assistant")]


def test_claude_code_sidechain_lines_are_a_child_session() -> None:
    """Guards against `naive_cc_main`: a subagent's sidechain lines would join the main
    conversation (its prompt as the person's words, its calls as the main agent's)."""
    rows = _rows(HELLO)
    sid = rows[1]["sessionId"]
    side = [
        {"type": "user", "uuid": "a-1", "parentUuid": None, "isSidechain": True, "agentId": "a1",
         "sessionId": sid, "message": {"role": "user", "content": "List the files in /tmp."}},
        {"type": "assistant", "uuid": "a-2", "parentUuid": "a-1", "isSidechain": True, "agentId": "a1",
         "sessionId": sid, "message": {"id": "msg_sub", "model": "claude-haiku-4-5", "role": "assistant",
                                       "content": [{"type": "text", "text": "hello.sh"}]}},
    ]  # fmt: skip
    mixed = [*rows[:5], *side, *rows[5:]]
    assert len(naive_cc_main(mixed)) == len(naive_cc_main(rows)) + 2
    main, child = _plan(_dump(mixed), "claude-code").sessions
    assert len(_replies(main.events)) == 4 and child.parent == "main" and child.key == "sidechain a1"
    assert not [e for e in main.events if isinstance(e, Text) and "List the files" in e.text]


# ---- Codex ---------------------------------------------------------------------------------


def _codex(lines: list[Row]) -> bytes:
    return _dump([{"timestamp": "2025-12-28T12:00:00.000Z", **x} for x in lines])


def _item(payload: Row) -> Row:
    return {"type": "response_item", "payload": payload}


def _usage(total_in: int, last_in: int, out: int) -> Row:
    return {"type": "event_msg", "payload": {"type": "token_count", "info": {
        "total_token_usage": {"input_tokens": total_in, "cached_input_tokens": 100, "output_tokens": out * 3},
        "last_token_usage": {"input_tokens": last_in, "cached_input_tokens": 100, "output_tokens": out}}}}  # fmt: skip


CODEX = [
    {"type": "session_meta", "payload": {"id": "s1", "cli_version": "0.77.0", "forked_from_id": "s0"}},
    {"type": "turn_context", "payload": {"model": "gpt-5.2-codex"}},
    _item({"type": "message", "role": "user",
           "content": [{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]}),
    _item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]}),
    {"type": "event_msg", "payload": {"type": "user_message", "message": "list files"}},
    _item({"type": "reasoning", "summary": [{"type": "summary_text", "text": "I should run ls"}],
           "encrypted_content": "gAAA"}),
    _item({"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}', "call_id": "call_1"}),
    _usage(900, 300, 20),
    _item({"type": "function_call_output", "call_id": "call_1", "output": "a.txt"}),
    {"type": "event_msg", "payload": {"type": "agent_message", "message": "There is one file."}},
    _item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "There is one file."}]}),
    _usage(1500, 600, 8),
]  # fmt: skip


def naive_codex_assistant_texts(lines: list[Row]) -> list[str]:
    """Naive: take the assistant's words from both places Codex writes them."""
    out = []
    for x in lines:
        p = x["payload"]
        if x["type"] == "event_msg" and p.get("type") == "agent_message":
            out.append(p["message"])
        if x["type"] == "response_item" and p.get("type") == "message" and p.get("role") == "assistant":
            out.append(p["content"][0]["text"])
    return out


def naive_codex_replies(lines: list[Row]) -> list[str]:
    """Naive: every assistant-side response_item is a reply of its own (its type listed)."""
    return [
        x["payload"]["type"]
        for x in lines
        if x["type"] == "response_item"
        and (
            x["payload"]["type"] in ("reasoning", "function_call") or x["payload"].get("role") == "assistant"
        )
    ]


def naive_codex_usage(lines: list[Row]) -> list[int]:
    """Naive: each turn's input tokens is its token_count's `total_token_usage` (minus cache)."""
    return [
        x["payload"]["info"]["total_token_usage"]["input_tokens"] - 100
        for x in lines
        if x["payload"].get("type") == "token_count"
    ]


def naive_codex_person_texts(lines: list[Row]) -> list[str]:
    """Naive: every user message item is the person's."""
    return [
        x["payload"]["content"][0]["text"]
        for x in lines
        if x["type"] == "response_item" and x["payload"].get("role") == "user"
    ]


def test_codex_assistant_message_appears_twice_and_is_used_once() -> None:
    """Guards against `naive_codex_assistant_texts` (event_msg and response_item both taken)."""
    assert naive_codex_assistant_texts(CODEX) == ["There is one file.", "There is one file."]
    replies = _replies(_events(_codex(CODEX), "codex"))
    texts = [b["text"] for r in replies for b in r.blocks if b["kind"] == "text"]
    assert texts == ["There is one file."]


def test_codex_usage_is_last_token_usage_not_the_cumulative_total() -> None:
    """Guards against `naive_codex_usage`: `total_token_usage` is cumulative over the session."""
    assert naive_codex_usage(CODEX) == [800, 1400]
    replies = _replies(_events(_codex(CODEX), "codex"))
    assert [r.usage and r.usage["input"] for r in replies] == [200, 500]
    assert replies[0].usage == {"input": 200, "output": 20, "cache_read": 100, "cache_write": 0}


def test_codex_reasoning_stays_with_its_reply() -> None:
    """Guards against `naive_codex_replies`: the reasoning item would be a reply of its own,
    separated from the call it opens (a thinking-only reply providers refuse to continue)."""
    assert naive_codex_replies(CODEX) == ["reasoning", "function_call", "message"]
    replies = _replies(_events(_codex(CODEX), "codex"))
    assert [[b["kind"] for b in r.blocks] for r in replies] == [["thinking", "tool_use"], ["text"]]


def test_codex_injected_text_is_runtime_and_the_fork_origin_is_kept() -> None:
    """Guards against `naive_codex_person_texts`: the CLI's `<environment_context>` would be the
    person's words."""
    assert naive_codex_person_texts(CODEX)[0].startswith("<environment_context>")
    (session,) = _plan(_codex(CODEX), "codex").sessions
    texts = [(t.speaker, t.text) for t in session.events if isinstance(t, Text)]
    assert texts == [("runtime", "<environment_context>cwd</environment_context>"), ("person", "list files")]
    assert session.facts["forked_from_id"] == "s0"


def naive_codex_items(lines: list[Row]) -> list[Row]:
    """Naive: the conversation is the `payload` of every `response_item` line."""
    return [x["payload"] for x in lines if x.get("type") == "response_item" and "payload" in x]


def test_codex_older_layout_reads_the_same() -> None:
    """Guards against `naive_codex_items`: the older layout has bare items (no payload)."""
    old = [
        {"id": "s1", "timestamp": "2025-05-01T00:00:00Z", "instructions": None},
        {"record_type": "state"},
        *[x["payload"] for x in CODEX if x["type"] == "response_item"],
    ]
    assert naive_codex_items(old) == []
    events = _events(_dump(old), "codex")
    assert len(_replies(events)) == 2 and len(_results(events)) == 1


# ---- OpenAI chat ---------------------------------------------------------------------------


def naive_chat_call_ids(messages: list[Row]) -> list[str]:
    """Naive: copy every tool call id as it stands."""
    return [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]


def test_openai_chat_ids_reused_in_a_later_turn_are_rekeyed_for_anthropic(tmp_path: Path) -> None:
    """Guards against `naive_chat_call_ids`: task 13 reuses two ids in later turns; Anthropic
    refuses a request with a repeated tool_use id."""
    traj = next(t["traj"] for t in json.loads(TAU.read_text()) if t["task_id"] == 13)
    naive = naive_chat_call_ids(traj)
    assert len(naive) - len(set(naive)) == 2
    ws = Workspace.init(tmp_path / "ws")
    task13 = next(r for r in ws.import_session(TAU).runs if r.session == "task 13")
    ids = [r.env.data["id"] for r in ws.records(run=task13.run) if r.kind_name == "tool_called"]
    assert task13.rekeyed == 2 and len(ids) == len(set(ids)) == len(naive)
    assert ws.request_at(task13.run, dialect="anthropic").verdicts["anthropic"] == []


def naive_chat_reply_blocks(message: Row) -> list[Row]:
    """Naive: an assistant message's content is its first text block, then its calls."""
    return [{"kind": "text", "text": message["content"] or ""}, *message["tool_calls"]]


def test_openai_chat_tool_calls_with_null_content_are_tool_only_replies() -> None:
    """Guards against `naive_chat_reply_blocks`: `content: null` becomes an empty text block,
    which providers refuse."""
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}  # fmt: skip
    messages = [
        {"role": "user", "content": "hi"},
        call,
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    assert naive_chat_reply_blocks(call)[0]["text"] == ""
    first = _replies(_events(json.dumps(messages).encode(), "openai-chat"))[0]
    assert [b["kind"] for b in first.blocks] == ["tool_use"]


# ---- SWE-agent -----------------------------------------------------------------------------


def naive_swe_messages(traj: Row) -> list[Row]:
    """Naive: the run is the last trajectory step's `query` (1.1.0; `messages` before)."""
    last = traj["trajectory"][-1]
    return last.get("query") or last["messages"]


def naive_swe_answered(messages: list[Row]) -> list[Any]:
    """Naive: a tool message answers the call named by its `tool_call_id`."""
    return [m.get("tool_call_id") for m in messages if m["role"] == "tool"]


def test_swe_agent_uses_history_not_the_last_steps_query() -> None:
    """Guards against `naive_swe_messages`: history processors elided older observations in
    each step's query."""
    traj = json.loads(SWE.read_text())
    elided = [
        dict(m, content="Old environment output: (5 lines omitted)") if m["role"] == "tool" else m
        for m in traj["history"][:6]
    ]
    traj["trajectory"] = [
        {"action": "submit", "query": elided, "observation": "", "response": "", "thought": ""}
    ]
    traj["info"] = {"swe_agent_version": "1.1.0"}
    naive = [m for m in naive_swe_messages(traj) if m["role"] == "tool"]
    assert naive and all("omitted" in m["content"] for m in naive)
    results = _results(_events(json.dumps(traj).encode(), "swe-agent", "x.traj"))
    assert len(results) == 5 and not any("omitted" in r.content for r in results)


def test_swe_agent_tool_call_ids_list_answers_the_call() -> None:
    """Guards against `naive_swe_answered`: SWE-agent writes a `tool_call_ids` list, so every
    tool message would answer no call."""
    history = json.loads(SWE.read_text())["history"]
    assert set(naive_swe_answered(history)) == {None}
    results = _results(_events(SWE.read_bytes(), "swe-agent", "x.traj"))
    want = [m["tool_call_ids"][0] for m in history if m["role"] == "tool"]
    assert [r.call_id for r in results] == want and want[0] == "call_PbWErNIge3YTrli3fiVvmIid"


# ---- OpenHands -----------------------------------------------------------------------------


def naive_oh_pairs(events: list[Row]) -> dict[str, str]:
    """Naive: the k-th tool observation answers the k-th tool action (no `cause` links)."""
    actions = [
        e["tool_call_metadata"]["tool_call_id"] for e in events if "action" in e and "tool_call_metadata" in e
    ]
    observations = [e["content"] for e in events if "observation" in e and e.get("cause") is not None
                    and e["observation"] not in ("recall", "agent_state_changed")]  # fmt: skip
    return dict(zip(actions, observations, strict=False))


def naive_oh_replies(events: list[Row]) -> list[str]:
    """Naive: one reply per tool action (its model_response id)."""
    return [
        e["tool_call_metadata"]["model_response"]["id"]
        for e in events
        if "action" in e and "tool_call_metadata" in e
    ]


def test_openhands_cause_pairs_results_and_parallel_calls_share_one_reply() -> None:
    """Guards against `naive_oh_pairs` and `naive_oh_replies`: with the observations of a
    parallel wave arriving out of order, pairing by position swaps their results; the two
    actions of one model response would be two replies."""
    events = json.loads(OPENHANDS.read_text())
    i, j = (k for k, e in enumerate(events) if e.get("id") in (9, 10))
    events[i], events[j] = events[j], events[i]  # the pytest run finishes before the file read
    naive = naive_oh_pairs(events)
    assert "FAILED" in naive["toolu_02"]  # the test output given to the read call
    assert len(naive_oh_replies(events)) == 5
    got = _events(json.dumps(events).encode(), "openhands", "oh.json")
    two = next(r for r in _replies(got) if len(r.calls) == 2)
    assert [c["id"] for c in two.calls] == ["toolu_02", "toolu_03"] and len(_replies(got)) == 4
    by_call = {r.call_id: r.content for r in _results(got)}
    assert "def add" in by_call["toolu_02"] and "FAILED" in by_call["toolu_03"]


def naive_oh_window(events: list[Row]) -> list[str]:
    """Naive: the window is every tool call of the log (a condensation is one more step)."""
    return [
        e["tool_call_metadata"]["tool_call_id"] for e in events if "action" in e and "tool_call_metadata" in e
    ]


def test_openhands_condensation_forgets_its_events(tmp_path: Path) -> None:
    """Guards against `naive_oh_window`: after the condensation the model no longer saw the
    forgotten events (toolu_01 and its result)."""
    events = json.loads(OPENHANDS.read_text())
    assert "toolu_01" in naive_oh_window(events)
    got = _events(OPENHANDS.read_bytes(), "openhands", "oh.json")
    (comp,) = [e for e in got if isinstance(e, Compaction)]
    assert comp.forgotten == ("event 5 (id 5)", "event 6 (id 6)") and comp.keeps_opening
    ws = Workspace.init(tmp_path / "ws")
    (run,) = ws.import_session(OPENHANDS).runs
    text = json.dumps(ws.request_at(run.run).body)
    assert "toolu_01" not in text and comp.summary in text


def naive_oh_unanswered(events: list[Row]) -> list[str]:
    """Naive: a call is closed only by an observation caused by it."""
    answered = {e.get("cause") for e in events if "observation" in e}
    return [e["tool_call_metadata"]["tool_call_id"] for e in events
            if "action" in e and "tool_call_metadata" in e and e["id"] not in answered]  # fmt: skip


def test_openhands_finish_without_observation_is_closed_like_a_lost_call(tmp_path: Path) -> None:
    """Guards against `naive_oh_unanswered`: the `finish` call would stay open, a tool_use
    without its tool_result that every provider refuses."""
    assert naive_oh_unanswered(json.loads(OPENHANDS.read_text())) == ["toolu_05"]
    ws = Workspace.init(tmp_path / "ws")
    (run,) = ws.import_session(OPENHANDS).runs
    assert run.lost == 1
    last = [r for r in ws.records(run=run.run) if r.kind_name == "tool_result"][-1]
    assert last.env.data["name"] == "finish" and last.env.data["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert ws.request_at(run.run).verdicts == ALL_VALID


def test_swe_agent_before_1_1_0_without_history_reads_the_last_steps_messages() -> None:
    """A trajectory from before 1.1.0 without `history`: its steps hold `messages` (`query`
    after); the last step's is read, and the facts say it may be partial."""
    traj = json.loads(SWE.read_text())
    history = traj.pop("history")
    traj["trajectory"] = [{"action": "submit", "messages": history, "observation": "", "response": ""}]
    traj["info"] = {"swe_agent_version": "1.0.1"}
    plan = _plan(json.dumps(traj).encode(), "swe-agent")
    (session,) = plan.sessions
    results = [e for e in session.events if isinstance(e, Result)]
    assert len(results) == sum(1 for m in history if m["role"] == "tool")
    assert results[0].origin[0].startswith("trajectory[0].messages[")
    assert "partial" in session.facts


def test_swe_agent_unknown_major_version_is_refused_naming_it() -> None:
    traj = json.loads(SWE.read_text())
    traj["info"] = {"swe_agent_version": "2.0.0"}
    with pytest.raises(RunfoldError) as err:
        _plan(json.dumps(traj).encode(), "swe-agent")
    shown = err.value.display()
    assert "on info.swe_agent_version of" in shown and "SWE-agent version 2.0.0" in shown, shown
    assert "this build reads the trajectories of SWE-agent 0.x and 1.x" in shown


def test_continue_leaves_foreign_reasoning_out_and_never_edits_it(tmp_path: Path) -> None:
    """Codex's reasoning item is another provider's thinking: the ledger keeps it as the source
    wrote it (summary and encrypted content), and a continuation on an Anthropic-dialect model
    sends a first request without it, which the validator accepts."""
    ws = Workspace.init(tmp_path / "ws")
    src = tmp_path / "rollout.jsonl"
    src.write_bytes(_codex(CODEX))
    (imported,) = ws.import_session(src, "codex").runs
    kept = [
        b
        for r in ws.records(run=imported.run)
        if r.kind_name == "model_returned"
        for b in r.env.data["message"]["content"]
        if b["kind"] == "thinking"
    ]
    assert kept == [
        {"dialect": "openai-responses", "kind": "thinking", "model": "gpt-5.2-codex",
         "signature": "gAAA", "thinking": "I should run ls"}
    ]  # fmt: skip
    script = tmp_path / "reply.jsonl"
    script.write_text(
        '{"content":[{"kind":"text","text":"Still one file."}],"usage":{"input":5,"output":4}}\n'
    )
    outcome = ws.continue_run(imported.run, model=f"script:{script}#anthropic", builtin_tools=False)
    assert outcome.completion == "done", outcome
    (called,) = [r for r in ws.records(run=outcome.run_id) if r.kind_name == "model_called"]
    first = ws.request_at(outcome.run_id, called.seq, dialect="anthropic")
    sent = json.dumps(first.body)
    assert "gAAA" not in sent and "I should run ls" not in sent
    assert "list files" in sent and "There is one file." in sent
    assert first.verdicts["anthropic"] == []
