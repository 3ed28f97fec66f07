"""Render a `RequestSpec` to an OpenAI Responses request body (DESIGN.md §8).

The conversation becomes a flat list of input items. Requests are stateless (`store: false`), so
reasoning travels as its encrypted content, and a reasoning item is sent only directly before the
item that followed it in the same reply, the grouping the API insists on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runfold.core.errors import invalid_args
from runfold.core.messages import Block, is_blank_text, text_block, thinking_block, tool_use_block
from runfold.core.render.spec import (
    OPENAI_RESPONSES,
    Rendered,
    RequestSpec,
    checked_messages,
    image_data,
    joined_system,
    need,
    temperature,
    thinking_kept,
)

ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""The `include` value that makes the API return reasoning as encrypted content."""


def render(spec: RequestSpec) -> Rendered:
    """The Responses body for `spec` (no cache breakpoints; OpenAI caches by prefix and
    `prompt_cache_key`).

    Body keys in order: `model`, `instructions?` (the system segments joined), `input`,
    `tools?` (`{type: function, name, description, parameters, strict}`; strict is sent as
    false unless the tool says otherwise, since the Responses default is strict),
    `prompt_cache_key?`, `store: false`, `include?` (`["reasoning.encrypted_content"]` when
    `spec.thinking` is set: models without reasoning refuse it), `max_output_tokens`, `stream?`,
    `reasoning?` (`effort`/`summary` of `spec.thinking`), `temperature?`.

    Items: user text/images → one `message` item per run of adjacent blocks (`input_text`,
    `input_image`); tool results → `function_call_output {call_id, output}` in place; assistant
    text → `message` items with `output_text`; tool calls → `function_call {call_id, name,
    arguments}` (arguments verbatim); reasoning produced by `openai-responses` for this model →
    `reasoning {encrypted_content, summary: []}` kept only when an item of the same reply follows
    it (of several reasoning blocks in a row, only the last: the API refuses a reasoning item
    followed by another, see `core.validate.openai_responses.reasoning_at`). The reasoning item's `id` is not sent: with `store: false` the API would look it up and
    fail, while the encrypted content is self-contained. Raises `E_INVALID_ARGS` like
    `anthropic.render`.
    """
    items: list[dict[str, Any]] = []
    for i, (role, blocks) in enumerate(checked_messages(spec.messages)):
        items.extend(render_message(spec, i, role, blocks))
    return finish(spec, items)


def render_message(spec: RequestSpec, i: int, role: str, blocks: list[Block]) -> list[dict[str, Any]]:
    """Checked message `i` as Responses input items (each message renders on its own)."""
    if role == "assistant":
        return _assistant(spec, blocks)
    return _user(spec, blocks, f"messages[{i}]")


def finish(spec: RequestSpec, items: list[dict[str, Any]]) -> Rendered:
    """The body of `render` around the rendered input `items`."""
    body: dict[str, Any] = {"model": spec.model}
    system = joined_system(spec)
    if system:
        body["instructions"] = system
    body["input"] = items
    if spec.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": bool(t.strict),
            }
            for t in spec.tools
        ]
    if spec.cache_key is not None:
        body["prompt_cache_key"] = spec.cache_key
    body["store"] = False
    if spec.thinking is not None:
        body["include"] = [ENCRYPTED_REASONING]
    body["max_output_tokens"] = spec.max_tokens
    if spec.stream:
        body["stream"] = True
    if spec.thinking is not None:
        reasoning = {k: spec.thinking[k] for k in ("effort", "summary") if k in spec.thinking}
        if reasoning:
            body["reasoning"] = reasoning
    temp = temperature(spec)
    if temp is not None:
        body["temperature"] = temp
    return Rendered(body)


def _assistant(spec: RequestSpec, blocks: list[Block]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # reasoning waiting for the item that follows it
    open_text: dict[str, Any] | None = None  # the message item adjacent text blocks join

    def emit(item: dict[str, Any]) -> None:
        items.extend(pending[-1:])  # of several in a row only the last has its following item
        pending.clear()
        items.append(item)

    for block in blocks:
        if block["kind"] == "thinking":
            if thinking_kept(block, OPENAI_RESPONSES, spec.model) and block["signature"]:
                pending.append({"type": "reasoning", "encrypted_content": block["signature"], "summary": []})
                open_text = None
        elif block["kind"] == "text":
            if is_blank_text(block):
                continue
            part = {"type": "output_text", "text": block["text"]}
            if open_text is not None and not pending:
                open_text["content"].append(part)
            else:
                open_text = {"type": "message", "role": "assistant", "content": [part]}
                emit(open_text)
        elif block["kind"] == "tool_use":
            emit(
                {
                    "type": "function_call",
                    "call_id": block["id"],
                    "name": block["name"],
                    "arguments": block["input"],
                }
            )
            open_text = None
        # redacted_thinking: Anthropic-only, never sent here
    return items  # reasoning still pending had no following item: dropped with its group


def _user(spec: RequestSpec, blocks: list[Block], where: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    open_msg: dict[str, Any] | None = None
    for j, block in enumerate(blocks):
        if block["kind"] == "tool_result":
            items.append(
                {"type": "function_call_output", "call_id": block["tool_use_id"], "output": block["content"]}
            )
            open_msg = None
            continue
        if block["kind"] == "text":
            if is_blank_text(block):
                continue
            part: dict[str, Any] = {"type": "input_text", "text": block["text"]}
        elif block["kind"] == "image":
            data = image_data(spec, block, f"{where}.content[{j}]")
            part = {"type": "input_image", "image_url": f"data:{block['media_type']};base64,{data}"}
        else:  # checked_messages admits no other kind in a user message
            continue
        if open_msg is None:
            open_msg = {"type": "message", "role": "user", "content": [part]}
            items.append(open_msg)
        else:
            open_msg["content"].append(part)
    return items


def parse_reply(response: Mapping[str, Any]) -> list[Block]:
    """The blocks of a Responses response (`{model, output: [items]}`).

    `reasoning` → a thinking block whose `thinking` is the summary texts joined by a blank line
    and whose `signature` is the encrypted content (empty when not included), with `dialect`,
    the item `id` and `model`; `message` → one text block per `output_text`/`refusal` part;
    `function_call` → `tool_use` with `call_id` and the arguments verbatim. Raises
    `E_INVALID_ARGS` naming `response.output[i]` for an item type runfold does not model.
    """
    model = response.get("model")
    blocks: list[Block] = []
    for i, item in enumerate(need(response, "output", list, "response")):
        path = f"response.output[{i}]"
        kind = need(item, "type", str, path)
        if kind == "reasoning":
            summary = [
                str(part.get("text", ""))
                for part in item.get("summary") or []
                if isinstance(part, dict) and part.get("type") == "summary_text"
            ]
            signature = item.get("encrypted_content")
            blocks.append(
                thinking_block(
                    "\n\n".join(summary),
                    signature if isinstance(signature, str) else "",
                    dialect=OPENAI_RESPONSES,
                    id=need(item, "id", str, path),
                    model=model if isinstance(model, str) else None,
                )
            )
        elif kind == "message":
            for j, part in enumerate(need(item, "content", list, path)):
                where = f"{path}.content[{j}]"
                part_type = need(part, "type", str, where)
                if part_type == "output_text":
                    blocks.append(text_block(need(part, "text", str, where)))
                elif part_type == "refusal":
                    blocks.append(text_block(need(part, "refusal", str, where)))
        elif kind == "function_call":
            blocks.append(
                tool_use_block(
                    need(item, "call_id", str, path),
                    need(item, "name", str, path),
                    need(item, "arguments", str, path),
                )
            )
        else:
            raise invalid_args(
                f"read reply item of type {kind!r}",
                path,
                "runfold models reasoning, message and function_call items",
            )
    return blocks
