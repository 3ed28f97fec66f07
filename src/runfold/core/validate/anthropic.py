"""The Anthropic Messages grammar: what `POST /v1/messages` accepts, checked before a request leaves.

It reports every violation of the body (`messages` with string or block content, tool_use and
tool_result pairing by the next message, tool results first, non-empty text, thinking blocks
first and signed) so that a request Anthropic would refuse is never sent (DESIGN.md §8).
Alternation is runfold's own demand: the API merges consecutive same-role turns, runfold's
conversation never produces them (DESIGN.md §6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runfold.core.validate.rules import (
    ANTHROPIC,
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

ROLES = ("user", "assistant")
USER_BLOCKS = frozenset({"text", "image", "document", "tool_result", "search_result", "container_upload"})
ASSISTANT_BLOCKS = frozenset(
    {
        "text",
        "tool_use",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
RESULT_CONTENT_BLOCKS = frozenset({"text", "image", "document", "search_result"})
THINKING_KINDS = frozenset({"thinking", "redacted_thinking"})


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """True when the body turns extended thinking on (`thinking.type` `enabled` or `adaptive`)."""
    cfg = body.get("thinking")
    return isinstance(cfg, dict) and cfg.get("type") in ("enabled", "adaptive")


def validate(body: Any) -> list[Violation]:
    """Every violation of the Anthropic Messages grammar in `body` (a parsed request), ordered by
    message index; an empty list means the body passes. Never raises on malformed input."""
    report = Report(ANTHROPIC)
    obj = body_object(report, body)
    if obj is None:
        return report.sorted()
    messages = entries_of(
        report,
        obj,
        "messages",
        "an array of messages",
        "`messages` is empty; send at least one user message",
    )
    if messages is None:
        return report.sorted()

    roles: list[str | None] = []
    blocks_of: list[list[dict[str, Any]]] = []
    calls: list[Call] = []
    results: list[Result] = []
    last = len(messages) - 1
    for i, msg in enumerate(messages):
        path = f"messages[{i}]"
        role, blocks = _check_message(report, i, path, msg, final=i == last)
        roles.append(role)
        blocks_of.append(blocks)

    for i in range(len(roles)):
        alternation_at(report, i, roles)
        calls.extend(calls_at(i, roles, blocks_of))
        results.extend(results_at(i, roles, blocks_of))
    check_pairing(report, calls, results, call_word="tool_use", result_word="tool_result")
    _check_results_first(report, roles, blocks_of)
    _check_thinking(report, obj, roles, blocks_of)
    return report.sorted()


def alternation_at(report: Report, i: int, roles: list[str | None]) -> None:
    """Message i's `first-message-user` / `roles-alternate` checks (reads messages i-1 and i)."""
    role = roles[i]
    if i == 0 and role is not None and role != "user":
        report.add(0, "first-message-user", "messages[0].role", f"the first message has role {role!r}")
    if i > 0 and role is not None and role == roles[i - 1]:
        report.add(
            i,
            "roles-alternate",
            f"messages[{i}].role",
            f"message {i} has role {role!r} like message {i - 1} before it",
        )


def calls_at(i: int, roles: list[str | None], blocks_of: list[list[dict[str, Any]]]) -> list[Call]:
    """The tool_use calls of message i; their answer zone is message i+1 when it is a user
    message (so they depend on the role of message i+1)."""
    if roles[i] != "assistant":
        return []
    calls = []
    for j, block in enumerate(blocks_of[i]):
        if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
            zone = range(i + 1, i + 2) if i + 1 < len(roles) and roles[i + 1] == "user" else range(0)
            calls.append(Call(block["id"], i, f"messages[{i}].content[{j}]", zone))
    return calls


def results_at(i: int, roles: list[str | None], blocks_of: list[list[dict[str, Any]]]) -> list[Result]:
    """The tool_result blocks of message i."""
    if roles[i] != "user":
        return []
    return [
        Result(block["tool_use_id"], i, f"messages[{i}].content[{j}]")
        for j, block in enumerate(blocks_of[i])
        if block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str)
    ]


def _check_message(
    report: Report, i: int, path: str, msg: Any, *, final: bool
) -> tuple[str | None, list[dict[str, Any]]]:
    """Check one message's shape; return its role (None when invalid) and its well-formed blocks."""
    if not isinstance(msg, dict):
        report.add(i, "content-shape", path, f"message {i} is a JSON {type_name(msg)}, not an object")
        return None, []
    role = msg.get("role")
    if role not in ROLES:
        hint = (
            " (Anthropic takes the system prompt as the top-level `system` field)" if role == "system" else ""
        )
        hint = " (tool results are `tool_result` blocks in a user message)" if role == "tool" else hint
        report.add(i, "role-valid", f"{path}.role", f"role {role!r} is not user or assistant{hint}")
        role = None
    if "tool_calls" in msg:
        report.add(
            i,
            "assistant-tool-form",
            f"{path}.tool_calls",
            "Anthropic carries tool calls as `tool_use` blocks in `content`, not a `tool_calls` field",
        )
    content = msg.get("content")
    exempt = final and role == "assistant"
    if isinstance(content, str):
        if content == "":
            if not exempt:
                report.add(i, "content-not-empty", f"{path}.content", f"message {i} has empty content")
        elif is_blank(content):
            report.add(i, "text-not-empty", f"{path}.content", f"message {i} content is whitespace only")
        elif exempt and content != content.rstrip():
            report.add(
                i,
                "final-assistant-trailing-whitespace",
                f"{path}.content",
                "the final assistant message ends with whitespace",
            )
        return role, [{"type": "text", "text": content}]
    if not isinstance(content, list):
        detail = "has no `content`" if content is None else f"content is a {type_name(content)}"
        report.add(
            i, "content-shape", f"{path}.content", f"message {i} {detail}; use a string or a block array"
        )
        return role, []
    if not content and not exempt:
        report.add(i, "content-not-empty", f"{path}.content", f"message {i} has an empty content array")
    blocks: list[dict[str, Any]] = []
    allowed = USER_BLOCKS if role == "user" else ASSISTANT_BLOCKS if role == "assistant" else None
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            report.add(i, "content-shape", bpath, "a content block must be an object with a string `type`")
            continue
        kind = block["type"]
        if kind not in USER_BLOCKS | ASSISTANT_BLOCKS:
            report.add(i, "content-shape", f"{bpath}.type", f"unknown content block type {kind!r}")
            continue
        if allowed is not None and kind not in allowed:
            report.add(
                i, "content-shape", f"{bpath}.type", f"a {kind!r} block cannot stand in a {role} message"
            )
            continue
        _check_block(report, i, bpath, block)
        blocks.append(block)
    if exempt and content and isinstance(content[-1], dict) and content[-1].get("type") == "text":
        text = content[-1].get("text")
        if isinstance(text, str) and not is_blank(text) and text != text.rstrip():
            report.add(
                i,
                "final-assistant-trailing-whitespace",
                f"{path}.content[{len(content) - 1}].text",
                "the final assistant message ends with whitespace",
            )
    return role, blocks


def _check_text(report: Report, i: int, path: str, block: Mapping[str, Any]) -> None:
    text = block.get("text")
    if not isinstance(text, str):
        report.add(
            i, "content-shape", f"{path}.text", f"a text block needs a string `text`, not {type_name(text)}"
        )
    elif text == "":
        report.add(i, "text-not-empty", f"{path}.text", "the text block is empty")
    elif is_blank(text):
        report.add(i, "text-not-empty", f"{path}.text", "the text block is whitespace only")


def _check_block(report: Report, i: int, path: str, block: Mapping[str, Any]) -> None:
    kind = block["type"]
    if kind == "text":
        _check_text(report, i, path, block)
    elif kind == "tool_use":
        for key in ("id", "name"):
            value = block.get(key)
            if not isinstance(value, str) or not value:
                report.add(
                    i, "content-shape", f"{path}.{key}", f"a tool_use block needs a non-empty string `{key}`"
                )
        if not isinstance(block.get("input"), dict):
            report.add(
                i,
                "content-shape",
                f"{path}.input",
                f"tool_use `input` must be a JSON object, not {type_name(block.get('input'))}",
            )
    elif kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str) or not block.get("tool_use_id"):
            report.add(
                i, "content-shape", f"{path}.tool_use_id", "a tool_result block needs a string `tool_use_id`"
            )
        if "is_error" in block and not isinstance(block["is_error"], bool):
            report.add(i, "content-shape", f"{path}.is_error", "`is_error` must be a boolean")
        inner = block.get("content")
        if isinstance(inner, list):
            for k, sub in enumerate(inner):
                spath = f"{path}.content[{k}]"
                if not isinstance(sub, dict) or sub.get("type") not in RESULT_CONTENT_BLOCKS:
                    report.add(
                        i,
                        "content-shape",
                        spath,
                        "tool_result content blocks are text, image, document or search_result",
                    )
                elif sub.get("type") == "text":
                    _check_text(report, i, spath, sub)
        elif inner is not None and not isinstance(inner, str):
            report.add(
                i,
                "content-shape",
                f"{path}.content",
                f"tool_result `content` must be a string or a block array, not {type_name(inner)}",
            )
    elif kind == "thinking":
        if not isinstance(block.get("thinking"), str):
            report.add(i, "content-shape", f"{path}.thinking", "a thinking block needs a string `thinking`")
        sig = block.get("signature")
        if not isinstance(sig, str) or not sig:
            report.add(
                i,
                "thinking-signed",
                f"{path}.signature",
                "the thinking block has no signature; send it back exactly as the model returned it",
            )
    elif kind == "redacted_thinking":
        data = block.get("data")
        if not isinstance(data, str) or not data:
            report.add(
                i,
                "thinking-signed",
                f"{path}.data",
                "the redacted_thinking block has no `data`; send it back exactly as returned",
            )


def _check_results_first(
    report: Report, roles: list[str | None], blocks_of: list[list[dict[str, Any]]]
) -> None:
    """In a user message answering tool_use blocks, every tool_result precedes any other block."""
    for i in range(1, len(roles)):
        results_first_at(report, i, roles, blocks_of)


def results_first_at(
    report: Report, i: int, roles: list[str | None], blocks_of: list[list[dict[str, Any]]]
) -> None:
    """The `tool-results-first` check of message i (it reads messages i-1 and i only)."""
    if i < 1 or roles[i] != "user" or roles[i - 1] != "assistant":
        return
    if not any(b.get("type") == "tool_use" for b in blocks_of[i - 1]):
        return
    seen_other = False
    for j, block in enumerate(blocks_of[i]):
        if block.get("type") != "tool_result":
            seen_other = True
        elif seen_other:
            report.add(
                i,
                "tool-results-first",
                f"messages[{i}].content[{j}]",
                f"a tool_result stands after other content in message {i}; put every tool_result "
                "first and the text after them",
            )
            break


def _check_thinking(
    report: Report,
    body: Mapping[str, Any],
    roles: list[str | None],
    blocks_of: list[list[dict[str, Any]]],
) -> None:
    """Thinking blocks lead their message; with thinking on, the tool loop's opener starts with one."""
    for i in range(len(blocks_of)):
        thinking_first_at(report, i, roles, blocks_of)
    if not thinking_enabled(body):
        return
    last = len(roles) - 1
    # Walk back over the current tool loop: assistant (tool_use) ← user (starting with tool_result).
    opener = last - 1
    while opener >= 2 and roles[opener] == "assistant" and _continues_loop(roles, blocks_of, opener - 1):
        opener -= 2
    check_opener(report, last, opener, roles, blocks_of)


def thinking_first_at(
    report: Report, i: int, roles: list[str | None], blocks_of: list[list[dict[str, Any]]]
) -> None:
    """The `thinking-first` check of assistant message i on its own: thinking blocks lead it."""
    if roles[i] != "assistant":
        return
    seen_other = False
    for j, block in enumerate(blocks_of[i]):
        if block.get("type") not in THINKING_KINDS:
            seen_other = True
        elif seen_other:
            report.add(
                i,
                "thinking-first",
                f"messages[{i}].content[{j}]",
                f"a {block.get('type')} block follows other content in message {i}; thinking comes first",
            )
            break


def loop_start(o: int, earlier: int, roles: list[str | None], blocks_of: list[list[dict[str, Any]]]) -> int:
    """One step of the walk back over a tool loop: `o` when message o does not continue a loop
    (else `earlier`, the walk's result from o-2)."""
    if o >= 2 and roles[o] == "assistant" and _continues_loop(roles, blocks_of, o - 1):
        return earlier
    return o


def check_opener(
    report: Report, last: int, opener: int, roles: list[str | None], blocks_of: list[list[dict[str, Any]]]
) -> None:
    """With thinking on and the body ending in tool results, the loop's `opener` (found by the
    walk back from message last-1) must start with a thinking block."""
    if roles[last] != "user" or not any(b.get("type") == "tool_result" for b in blocks_of[last]):
        return
    if opener < 0 or roles[opener] != "assistant":
        return
    blocks = blocks_of[opener]
    first = blocks[0].get("type") if blocks else None
    if first not in THINKING_KINDS:
        report.add(
            opener,
            "thinking-first",
            f"messages[{opener}].content[0]",
            f"thinking is enabled and message {opener} opened the current tool loop, but it starts with "
            f"{first!r} instead of a thinking block",
        )


def _continues_loop(roles: list[str | None], blocks_of: list[list[dict[str, Any]]], i: int) -> bool:
    """True when message i is a user message that answers tools (starts with a tool_result)."""
    return (
        roles[i] == "user"
        and bool(blocks_of[i])
        and blocks_of[i][0].get("type") == "tool_result"
        and i >= 1
        and roles[i - 1] == "assistant"
    )
