"""Render a `RequestSpec` to an OpenAI Chat Completions request body (DESIGN.md §8).

Chat has no content blocks for tool traffic: tool calls become `tool_calls` on the assistant
message (arguments as their original JSON text), results become `role: tool` messages that
directly follow it, and thinking is never sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runfold.core.errors import invalid_args
from runfold.core.messages import Block, is_blank_text, text_block, tool_use_block
from runfold.core.render.spec import (
    Rendered,
    RequestSpec,
    checked_messages,
    image_data,
    joined_system,
    need,
    temperature,
)


def render(spec: RequestSpec) -> Rendered:
    """The Chat Completions body for `spec` (no cache breakpoints: OpenAI caches by prefix and
    `prompt_cache_key`).

    Body keys in order: `model`, `messages`, `tools?` (`{type: function, function: {name,
    description, parameters[, strict]}}`), `prompt_cache_key?`, `stream?`, `stream_options?`
    (`{include_usage: true}` when streaming), `max_completion_tokens`, `reasoning_effort?`,
    `temperature?`. The system segments join into one leading system message.

    A user message renders as its tool messages first (in the call order of the assistant
    message before it; Chat requires them right after the calls), then one user message with its
    text and images when it has any. An assistant message renders with `content` null when it
    holds only tool calls and is left out when nothing remains (thinking only). Raises
    `E_INVALID_ARGS` like `anthropic.render`.
    """
    wire: list[dict[str, Any]] = []
    call_order: dict[str, int] = {}
    for i, (role, blocks) in enumerate(checked_messages(spec.messages)):
        pieces, call_order = render_message(spec, i, role, blocks, call_order)
        wire.extend(pieces)
    return finish(spec, wire)


def render_message(
    spec: RequestSpec, i: int, role: str, blocks: list[Block], call_order: dict[str, int]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Checked message `i` as Chat messages, given the call order of the message before it
    (`{}` unless that one is an assistant message); returns them and the call order the next
    message sees."""
    if role == "assistant":
        msg = _assistant(blocks)
        order = {b["id"]: n for n, b in enumerate(b for b in blocks if b["kind"] == "tool_use")}
        return ([] if msg is None else [msg]), order
    return _user(spec, blocks, call_order, f"messages[{i}]"), {}


def finish(spec: RequestSpec, wire: list[dict[str, Any]]) -> Rendered:
    """The body of `render` around the rendered conversation `wire` (system message added)."""
    messages: list[dict[str, Any]] = []
    system = joined_system(spec)
    if system:
        messages.append({"role": "system", "content": system})
    messages.extend(wire)
    body: dict[str, Any] = {"model": spec.model, "messages": messages}
    if spec.tools:
        tools = []
        for t in spec.tools:
            function: dict[str, Any] = {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            }
            if t.strict is not None:
                function["strict"] = t.strict
            tools.append({"type": "function", "function": function})
        body["tools"] = tools
    if spec.cache_key is not None:
        body["prompt_cache_key"] = spec.cache_key
    if spec.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body["max_completion_tokens"] = spec.max_tokens
    if spec.thinking is not None and "effort" in spec.thinking:
        body["reasoning_effort"] = spec.thinking["effort"]
    temp = temperature(spec)
    if temp is not None:
        body["temperature"] = temp
    return Rendered(body)


def _assistant(blocks: list[Block]) -> dict[str, Any] | None:
    texts = [b["text"] for b in blocks if b["kind"] == "text" and not is_blank_text(b)]
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": b["input"]},
        }
        for b in blocks
        if b["kind"] == "tool_use"
    ]
    if not texts and not calls:
        return None
    content: Any
    if not texts:
        content = None
    elif len(texts) == 1:
        content = texts[0]
    else:
        content = [{"type": "text", "text": t} for t in texts]
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user(
    spec: RequestSpec, blocks: list[Block], call_order: dict[str, int], where: str
) -> list[dict[str, Any]]:
    results = [(n, b) for n, b in enumerate(blocks) if b["kind"] == "tool_result"]
    # results answering the previous message's calls go in call order; any other keeps its place after them
    results.sort(key=lambda item: (call_order.get(item[1]["tool_use_id"], len(call_order)), item[0]))
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]} for _, b in results
    ]
    parts: list[dict[str, Any]] = []
    for j, b in enumerate(blocks):
        if b["kind"] == "text" and not is_blank_text(b):
            parts.append({"type": "text", "text": b["text"]})
        elif b["kind"] == "image":
            data = image_data(spec, b, f"{where}.content[{j}]")
            parts.append({"type": "image_url", "image_url": {"url": f"data:{b['media_type']};base64,{data}"}})
    if len(parts) == 1 and parts[0]["type"] == "text":
        out.append({"role": "user", "content": parts[0]["text"]})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def parse_reply(response: Mapping[str, Any]) -> list[Block]:
    """The blocks of a Chat Completions response: `choices[0].message` as a text block (when its
    content is not empty) followed by one `tool_use` per tool call, arguments verbatim. Raises
    `E_INVALID_ARGS` naming the field when the response has no such message."""
    choices = need(response, "choices", list, "response")
    if not choices:
        raise invalid_args("read reply", "response.choices", "the response holds no choice; retry the call")
    msg = need(choices[0], "message", dict, "response.choices[0]")
    path = "response.choices[0].message"
    blocks: list[Block] = []
    content = msg.get("content")
    if isinstance(content, str) and content:
        blocks.append(text_block(content))
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text":
                blocks.append(text_block(need(part, "text", str, f"{path}.content[{j}]")))
    refusal = msg.get("refusal")
    if isinstance(refusal, str) and refusal:
        blocks.append(text_block(refusal))
    for k, call in enumerate(msg.get("tool_calls") or []):
        where = f"{path}.tool_calls[{k}]"
        function = need(call, "function", dict, where)
        blocks.append(
            tool_use_block(
                need(call, "id", str, where),
                need(function, "name", str, f"{where}.function"),
                need(function, "arguments", str, f"{where}.function"),
            )
        )
    return blocks
