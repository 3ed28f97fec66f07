"""The OpenAI Chat Completions grammar: what `POST /v1/chat/completions` accepts in `messages`.

Tool calls live in an assistant message's `tool_calls` and are answered by `tool` messages that
follow it directly, one per id; a `tool` message must answer a call of the assistant message
before it (DESIGN.md §8). An id may be used again by a later assistant message (recorded
trajectories do this and the API accepts it); within one message, and within one run of tool
messages, an id is still used once. Chat does not need user/assistant alternation, so none is demanded;
empty text is runfold's own refusal (the conversation never holds it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runfold.core.validate.rules import (
    OPENAI_CHAT,
    Call,
    Report,
    Result,
    Violation,
    body_object,
    check_pairing,
    entries_of,
    is_blank,
    type_name,
)

ROLES = ("system", "developer", "user", "assistant", "tool")
PART_TYPES: Mapping[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
}


def validate(body: Any) -> list[Violation]:
    """Every violation of the Chat Completions grammar in `body` (a parsed request), ordered by
    message index; an empty list means the body passes. Never raises on malformed input."""
    report = Report(OPENAI_CHAT)
    obj = body_object(report, body)
    if obj is None:
        return report.sorted()
    messages = entries_of(
        report, obj, "messages", "an array of messages", "`messages` is empty; send at least one message"
    )
    if messages is None:
        return report.sorted()

    roles: list[str | None] = []
    for i, msg in enumerate(messages):
        roles.append(_check_message(report, i, f"messages[{i}]", msg))

    calls: list[Call] = []
    results: list[Result] = []
    for i in range(len(messages)):
        calls.extend(calls_at(messages, roles, i))
        results.extend(results_at(messages, roles, i))
    check_pairing(report, calls, results, call_word="tool call", result_word="tool message", reuse=True)
    return report.sorted()


def calls_at(messages: list[Any], roles: list[str | None], i: int) -> list[Call]:
    """The tool calls of message i; their answer zone is the run of tool messages after it (so
    they depend on the messages up to the end of that run)."""
    msg = messages[i]
    if roles[i] != "assistant" or not isinstance(msg.get("tool_calls"), list):
        return []
    end = i + 1
    while end < len(roles) and roles[end] == "tool":
        end += 1
    zone = range(i + 1, end)
    return [
        Call(tc["id"], i, f"messages[{i}].tool_calls[{j}]", zone)
        for j, tc in enumerate(msg["tool_calls"])
        if isinstance(tc, dict) and isinstance(tc.get("id"), str)
    ]


def results_at(messages: list[Any], roles: list[str | None], i: int) -> list[Result]:
    """The result message i is (a tool message), if any."""
    msg = messages[i]
    if roles[i] == "tool" and isinstance(msg.get("tool_call_id"), str):
        return [Result(msg["tool_call_id"], i, f"messages[{i}]")]
    return []


def _check_message(report: Report, i: int, path: str, msg: Any) -> str | None:
    """Check one message's shape; return its role, or None when it has none this dialect knows."""
    if not isinstance(msg, dict):
        report.add(i, "content-shape", path, f"message {i} is a JSON {type_name(msg)}, not an object")
        return None
    raw_role = msg.get("role")
    if raw_role not in ROLES:
        hint = " (the `function` role is deprecated; answer tool calls with `tool` messages)"
        report.add(
            i,
            "role-valid",
            f"{path}.role",
            f"role {raw_role!r} is not one of {', '.join(ROLES)}" + (hint if raw_role == "function" else ""),
        )
        return None
    role = str(raw_role)
    content = msg.get("content")
    tool_calls = msg.get("tool_calls")
    if role == "assistant":
        if "tool_calls" in msg:
            _check_tool_calls(report, i, path, tool_calls)
        has_calls = isinstance(tool_calls, list) and bool(tool_calls)
        if content is None:
            if not has_calls and msg.get("refusal") is None and msg.get("audio") is None:
                report.add(
                    i,
                    "content-not-empty",
                    f"{path}.content",
                    "an assistant message needs `content` unless it has `tool_calls`",
                )
            return role
        if has_calls and isinstance(content, str) and is_blank(content):
            report.add(
                i,
                "assistant-tool-form",
                f"{path}.content",
                f"a tool-only assistant message carries `content: null` (or omits it), not {content!r}",
            )
            return role
    else:
        if "tool_calls" in msg:
            report.add(
                i,
                "assistant-tool-form",
                f"{path}.tool_calls",
                f"only assistant messages carry `tool_calls`, not {role}",
            )
        if content is None:
            report.add(i, "content-not-empty", f"{path}.content", f"a {role} message needs `content`")
            return role
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            report.add(
                i, "content-shape", f"{path}.tool_call_id", "a tool message needs a string `tool_call_id`"
            )
    _check_content(report, i, path, role, content)
    return role


def _check_content(report: Report, i: int, path: str, role: str, content: Any) -> None:
    cpath = f"{path}.content"
    if isinstance(content, str):
        if is_blank(content) and role != "tool":
            what = "empty" if content == "" else "whitespace only"
            report.add(i, "text-not-empty", cpath, f"the {role} message's content is {what}")
        return
    if not isinstance(content, list):
        report.add(
            i,
            "content-shape",
            cpath,
            f"`content` must be a string or an array of parts, not {type_name(content)}",
        )
        return
    if not content:
        report.add(i, "content-not-empty", cpath, f"the {role} message's content array is empty")
        return
    for j, part in enumerate(content):
        ppath = f"{cpath}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in PART_TYPES[role]:
            if kind in ("tool_use", "tool_call", "function_call") and role == "assistant":
                report.add(
                    i,
                    "assistant-tool-form",
                    ppath,
                    f"a {kind!r} content part: Chat carries tool calls in the message's `tool_calls`",
                )
            else:
                allowed = ", ".join(sorted(PART_TYPES[role]))
                report.add(i, "content-shape", ppath, f"a {role} content part must be one of: {allowed}")
            continue
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                report.add(i, "content-shape", f"{ppath}.text", "a text part needs a string `text`")
            elif is_blank(text) and role != "tool":
                report.add(i, "text-not-empty", f"{ppath}.text", "the text part is empty or whitespace only")


def _check_tool_calls(report: Report, i: int, path: str, tool_calls: Any) -> None:
    tpath = f"{path}.tool_calls"
    if not isinstance(tool_calls, list):
        report.add(i, "content-shape", tpath, f"`tool_calls` must be an array, not {type_name(tool_calls)}")
        return
    if not tool_calls:
        report.add(
            i, "assistant-tool-form", tpath, "`tool_calls` is an empty array; omit it when there are no calls"
        )
        return
    for j, tc in enumerate(tool_calls):
        cpath = f"{tpath}[{j}]"
        if not isinstance(tc, dict):
            report.add(i, "content-shape", cpath, "a tool call must be an object")
            continue
        if not isinstance(tc.get("id"), str) or not tc.get("id"):
            report.add(i, "content-shape", f"{cpath}.id", "a tool call needs a non-empty string `id`")
        kind = tc.get("type")
        if kind == "function":
            fn = tc.get("function")
            if not isinstance(fn, dict):
                report.add(
                    i, "content-shape", f"{cpath}.function", "a function tool call needs a `function` object"
                )
                continue
            if not isinstance(fn.get("name"), str) or not fn.get("name"):
                report.add(i, "content-shape", f"{cpath}.function.name", "the function needs a string `name`")
            if not isinstance(fn.get("arguments"), str):
                report.add(
                    i,
                    "content-shape",
                    f"{cpath}.function.arguments",
                    f"`arguments` must be the arguments' JSON text (a string), not {type_name(fn.get('arguments'))}",
                )
        elif kind == "custom":
            custom = tc.get("custom")
            if not isinstance(custom, dict) or not isinstance(custom.get("name"), str):
                report.add(i, "content-shape", f"{cpath}.custom", "a custom tool call needs `custom.name`")
        else:
            report.add(
                i, "content-shape", f"{cpath}.type", f"tool call type {kind!r} is not function or custom"
            )
