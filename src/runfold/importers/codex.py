"""Codex CLI rollout files (`~/.codex/sessions/…/rollout-*.jsonl`) as an import plan.

Every line is `{timestamp, type, payload}`. The conversation is the `response_item` lines: the
assistant's words also appear as `event_msg` `agent_message` (skipped: one copy is used), and a
reply is the run of assistant-side items between two inputs — reasoning items stay with the
reply they open. A user message is the person's when an `event_msg` `user_message` repeats it;
the ones the CLI injects (AGENTS.md, `<environment_context>`) have none and are runtime text.
Usage is `token_count`'s `last_token_usage` (its `total_token_usage` is cumulative over the
session). `session_meta` gives provenance, including `forked_from_id`. The older layout (a bare
meta object on line 1, bare items after it, `record_type` lines) reads the same way.
"""

from __future__ import annotations

from typing import Any

from runfold.core.exact_json import ExactNumber
from runfold.core.messages import Block, text_block, thinking_block
from runfold.importers.common import call_block, jsonl, ms, text_of
from runfold.importers.plan import (
    Event,
    ImportPlan,
    Reply,
    Result,
    Session,
    Speaker,
    Text,
    as_int,
    bad_source,
    check_version,
)

FORMAT = "codex"
ASSISTANT_ITEMS = frozenset({"reasoning", "function_call", "custom_tool_call", "local_shell_call"})
OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
LINE_TYPES = ("session_meta", "turn_context", "response_item", "event_msg", "compacted")
"""The `type`s of a `{timestamp, type, payload}` line this build reads."""
KNOWN_MAJOR = frozenset({"0"})
"""The Codex CLI major versions (`session_meta.cli_version`) whose rollouts this build reads."""
SUPPORTED = (
    "this build reads Codex CLI 0.x rollouts: {timestamp, type, payload} lines of type "
    + ", ".join(LINE_TYPES)
    + ", or the older layout (a meta object on line 1, then bare items with a type and record_type lines)"
)


def detect(data: bytes) -> bool:
    """Whether `data` looks like a Codex rollout (new or older layout)."""
    head = data[:65536]
    return (
        b'"type":"session_meta"' in head
        or (b'"response_item"' in head and b'"payload"' in head)
        or (b'"instructions"' in head and b'"record_type"' in head)
    )


def parse(data: bytes, source: str) -> ImportPlan:
    """The plan of a Codex rollout (see the module docstring). Raises `E_INVALID_ARGS` naming
    the line for a line that is not JSON (a torn last line included), a `cli_version` whose
    major this build does not know, or a line of neither layout (an unknown line `type`, a bare
    item without one)."""
    skipped: list[tuple[str, str]] = []
    rows = list(jsonl(FORMAT, source, data))
    items: list[tuple[str, str, dict[str, Any], int | None]] = []  # (where, type, payload, t)
    facts: dict[str, str] = {}
    older = bool(rows) and "type" not in rows[0][1] and "payload" not in rows[0][1]
    for n, row in rows:
        where = f"line {n}"
        if "payload" in row and isinstance(row.get("payload"), dict):
            if row.get("type") not in LINE_TYPES:
                _unknown(source, where, f"a line of type {row.get('type')!r}")
            items.append((where, str(row.get("type")), row["payload"], ms(row.get("timestamp"))))
        elif n == rows[0][0] and "type" not in row:  # the older layout's meta line
            items.append((where, "session_meta", row, ms(row.get("timestamp"))))
        elif "record_type" in row:
            skipped.append((where, f"record_type {row.get('record_type')} (resume state, not conversation)"))
        elif older and isinstance(row.get("type"), str) and not isinstance(row.get("type"), ExactNumber):
            items.append((where, "response_item", row, ms(row.get("timestamp"))))
        else:
            what = "a bare item without a type" if older else "a line without a payload"
            _unknown(source, where, what)
        kind, meta = items[-1][1:3] if items else ("", {})
        version = meta.get("cli_version") if kind == "session_meta" and items[-1][0] == where else None
        check_version(FORMAT, source, where, "Codex CLI", version, KNOWN_MAJOR, SUPPORTED)
    said = {
        str(p.get("message")).strip()
        for _, kind, p, _ in items
        if kind == "event_msg" and p.get("type") == "user_message"
    }
    events: list[Event] = []
    model = ""
    open_reply: list[tuple[str, dict[str, Any], int | None]] = []

    def flush() -> None:
        if open_reply:
            events.append(_reply(open_reply, model))
            open_reply.clear()

    for where, kind, p, t in items:
        ptype = p.get("type") if isinstance(p.get("type"), str) else None
        if kind == "session_meta":
            for key in ("id", "cli_version", "originator", "forked_from_id", "model_provider"):
                if isinstance(p.get(key), str):
                    facts[key] = p[key]
            skipped.append((where, "session_meta (provenance, kept in session_imported.facts)"))
        elif kind == "turn_context":
            model = str(p.get("model") or model)
            skipped.append((where, "turn_context (the model is kept on each reply)"))
        elif kind == "event_msg":
            if ptype == "token_count":
                _usage_onto(events, open_reply, p, model, flush)
            skipped.append((where, f"event_msg {ptype} (the response_item lines carry the conversation)"))
        elif kind == "compacted":
            flush()
            events.append(Text("runtime", text_of(p.get("message")), (where,), t))
        elif kind != "response_item":
            skipped.append((where, f"{kind} line"))
        elif (ptype == "message" and p.get("role") == "assistant") or ptype in ASSISTANT_ITEMS:
            open_reply.append((where, p, t))
        elif ptype == "message":
            flush()
            text = text_of(p.get("content"))
            speaker: Speaker = "person" if text.strip() in said else "runtime"
            events.append(Text(speaker, text, (where,), t))
        elif ptype in OUTPUT_ITEMS:
            flush()
            output = p.get("output")
            content = text_of(output.get("content") if isinstance(output, dict) else output)
            events.append(Result(str(p.get("call_id")), content, False, (where,), t))
        else:
            skipped.append((where, f"response_item {ptype} (not sent back to the model)"))
    flush()
    return ImportPlan(
        FORMAT, source, (Session("main", tuple(events), model, None, None, facts),), tuple(skipped)
    )


def _unknown(source: str, where: str, what: str) -> None:
    raise bad_source(
        FORMAT,
        source,
        where,
        f"{what} is a format this build does not know; {SUPPORTED}",
        "check the file's format (`runfold import auto FILE` names it); for a newer Codex CLI, upgrade runfold",
    )


def _reply(parts: list[tuple[str, dict[str, Any], int | None]], model: str) -> Reply:
    blocks: list[Block] = []
    for _, p, _ in parts:
        ptype = p.get("type")
        if ptype == "reasoning":
            summary = p.get("summary")
            text = (
                "\n".join(str(s.get("text") or "") for s in summary if isinstance(s, dict))
                if isinstance(summary, list)
                else ""
            )
            blocks.append(
                thinking_block(
                    text,
                    str(p.get("encrypted_content") or ""),
                    dialect="openai-responses",
                    id=str(p["id"]) if isinstance(p.get("id"), str) else None,
                    model=model or None,
                )
            )
        elif ptype == "message":
            blocks.append(text_block(text_of(p.get("content"))))
        elif ptype == "function_call":
            blocks.append(call_block(str(p.get("call_id")), str(p.get("name") or ""), p.get("arguments")))
        elif ptype == "custom_tool_call":
            blocks.append(
                call_block(str(p.get("call_id")), str(p.get("name") or ""), {"input": p.get("input")})
            )
        elif ptype == "local_shell_call":
            blocks.append(call_block(str(p.get("call_id")), "local_shell", p.get("action")))
    return Reply(tuple(blocks), tuple(w for w, _, _ in parts), model, None, None, parts[0][2])


def _usage_onto(
    events: list[Event], open_reply: list[Any], p: dict[str, Any], model: str, flush: Any
) -> None:
    """Put a `token_count`'s `last_token_usage` on the reply it reports (the one just given)."""
    info = p.get("info")
    last = info.get("last_token_usage") if isinstance(info, dict) else None
    if not isinstance(last, dict):
        return
    flush()
    for k in range(len(events) - 1, -1, -1):
        ev = events[k]
        if isinstance(ev, Reply):
            cached = as_int(last.get("cached_input_tokens"))
            usage = {
                "input": max(as_int(last.get("input_tokens")) - cached, 0),
                "output": as_int(last.get("output_tokens")),
                "cache_read": cached,
                "cache_write": 0,
            }
            events[k] = Reply(ev.blocks, ev.origin, ev.model or model, usage, ev.stop, ev.t)
            return
        if not isinstance(ev, Result):
            return
