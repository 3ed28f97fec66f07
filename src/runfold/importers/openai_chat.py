"""OpenAI Chat Completions message logs as an import plan: a message array, an object holding
one (`messages`, or `traj` as tau-bench records them), or an array of such objects (one run each).

An assistant message with `tool_calls` may carry `content: null`; `tool` messages answer by
`tool_call_id`, and recorded trajectories reuse an id in a later turn (the API accepts it): each
result answers the open call of its own wave, and the ledger re-keys the reused id so that the
Anthropic dialect, which needs unique ids, can be rendered too.
"""

from __future__ import annotations

from typing import Any

from runfold.importers.common import call_block, text_blocks, text_of, whole_json
from runfold.importers.plan import Event, ImportPlan, Reply, Result, Session, Text, bad_source

FORMAT = "openai-chat"
HOLDERS = ("messages", "traj")


def detect(data: bytes) -> bool:
    """Whether `data` looks like a Chat message log (roles and contents in one JSON value)."""
    head = data[:65536].lstrip()
    return (
        head[:1] in (b"[", b"{")
        and b'"role"' in head
        and b'"content"' in head
        and b'"tool_call_ids"' not in head
    )


def parse(data: bytes, source: str) -> ImportPlan:
    """The plan of a Chat log (see the module docstring). Raises `E_INVALID_ARGS` naming the
    position for malformed JSON, a shape holding no message array, or a message without a role."""
    value = whole_json(FORMAT, source, data)
    found = _conversations(value)
    if found is None:
        raise bad_source(
            FORMAT,
            source,
            "the top level",
            "no message array found (expected [messages], {messages: [...]} or [{traj: [...]}])",
            "give a file holding Chat messages, or name its format (`runfold import auto FILE`)",
        )
    sessions = []
    for key, where, messages in found:
        events, system, model = chat_events(messages, where, FORMAT, source)
        sessions.append(Session(key, tuple(events), model, system))
    return ImportPlan(FORMAT, source, tuple(sessions))


def _conversations(value: Any) -> list[tuple[str, str, list[Any]]] | None:
    if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
        return [("main", "messages", value)]
    if isinstance(value, dict):
        for holder in HOLDERS:
            if isinstance(value.get(holder), list):
                return [("main", holder, value[holder])]
        return None
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = []
        for i, v in enumerate(value):
            found = next((h for h in HOLDERS if isinstance(v.get(h), list)), None)
            if found is None:
                return None
            name = v.get("task_id", v.get("id", i))
            out.append((f"task {name}", f"[{i}].{found}", v[found]))
        return out
    return None


def chat_events(
    messages: list[Any], where: str, fmt: str, source: str
) -> tuple[list[Event], str | None, str]:
    """The events of a Chat message array (`where` prefixes each origin, e.g. `messages`):
    the first system message is the system prompt, later ones runtime text; `tool_call_ids`
    (SWE-agent's list form) is read like `tool_call_id`. Returns (events, system, model)."""
    events: list[Event] = []
    system: str | None = None
    model = ""
    for i, msg in enumerate(messages):
        at = f"{where}[{i}]"
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise bad_source(
                fmt, source, at, "the message has no role", "every message needs a role; repair the file"
            )
        role = msg["role"]
        if role in ("system", "developer"):
            text = text_of(msg.get("content"))
            if system is None and not events:
                system = text
            else:
                events.append(Text("runtime", text, (at,)))
        elif role == "user":
            events.append(Text("person", text_of(msg.get("content")), (at,)))
        elif role == "assistant":
            model = str(msg.get("model") or model)
            blocks = text_blocks(text_of(msg.get("content")))
            calls = msg.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                raise bad_source(
                    fmt, source, f"{at}.tool_calls", "tool_calls is not an array", "repair the tool calls"
                )
            for tc in calls or []:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict):
                    raise bad_source(fmt, source, at, "a tool call has no function", "repair the tool call")
                blocks.append(call_block(str(tc.get("id")), str(fn.get("name") or ""), fn.get("arguments")))
            events.append(Reply(tuple(blocks), (at,), str(msg.get("model") or "")))
        elif role in ("tool", "function"):
            ids = msg.get("tool_call_ids")
            ids = ids if isinstance(ids, list) else [msg.get("tool_call_id")]
            for call_id in ids:
                if not isinstance(call_id, str) or not call_id:
                    raise bad_source(
                        fmt,
                        source,
                        at,
                        "the tool message names no call (tool_call_id)",
                        "a tool message must name the call it answers; repair the file",
                    )
                events.append(Result(call_id, text_of(msg.get("content")), False, (at,)))
        else:
            raise bad_source(
                fmt, source, at, f"role {role!r} is not a Chat role", "use system, user, assistant or tool"
            )
    return events, system, model
