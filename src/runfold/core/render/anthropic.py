"""Render a `RequestSpec` to an Anthropic Messages request body (DESIGN.md §8).

Thinking blocks travel byte-exact with their signatures, foreign-model thinking is omitted whole,
tool inputs are parsed from their original JSON text, and up to four `cache_control` breakpoints
are placed on stable system-segment edges and on the conversation's last block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from runfold.core.errors import invalid_args
from runfold.core.messages import (
    Block,
    is_blank_text,
    redacted_thinking_block,
    text_block,
    thinking_block,
    tool_use_block,
)
from runfold.core.render.spec import (
    ANTHROPIC,
    MAX_BREAKPOINTS,
    TAIL,
    TOOLS,
    Rendered,
    RequestSpec,
    checked_messages,
    image_data,
    is_sent,
    need,
    parse_arguments,
    temperature,
    thinking_kept,
)

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
"""The only `cache_control` value runfold sends (5-minute cache)."""
UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})
"""Block types that may not carry `cache_control` (they are cached with their turn instead)."""
THINKING_CONFIG_KEYS = frozenset({"effort", "summary"})
"""Keys of `RequestSpec.thinking` meant for OpenAI, left out of Anthropic's `thinking`."""


def render(spec: RequestSpec) -> Rendered:
    """The Anthropic Messages body for `spec`, and the breakpoints placed.

    Body keys in order: `model`, `max_tokens`, `system?` (text blocks), `tools?`
    (`{name, description, input_schema}`), `messages`, `stream?`, `thinking?`, `temperature?`.
    `thinking` is `spec.thinking` without the OpenAI keys, sent when it has a `type` — except
    while a tool loop opened by a reply without sent thinking is continued (see
    `_loop_opener_thinks`).
    An assistant message left with no content (its only blocks were foreign thinking or blank
    text) is not sent and the user messages around it are joined, so roles keep alternating.
    Raises `E_INVALID_ARGS` for a malformed block or an image whose data is not in
    `spec.images`, naming `messages[i].content[j]`.
    """
    return finish(spec, _messages(spec))


def finish(spec: RequestSpec, messages: list[dict[str, Any]], opener: int | None = None) -> Rendered:
    """The body of `render` around already rendered wire `messages` (alternating, merged).

    Places the breakpoints, marking the tail block of `messages[-1]` in place: the incremental
    renderer passes a fresh copy of its last message. `opener`: the tool loop walk's result from
    message len-2 (see `loop_step`) when the caller keeps it; None walks back here.
    """
    system = [{"type": "text", "text": seg.text} for seg in spec.system if is_sent(seg)]
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in spec.tools
    ]
    breakpoints: list[str] = []
    if spec.cache_breakpoints:
        tail_block = _tail_block(messages, spec.uncached_tail)
        budget = MAX_BREAKPOINTS - (1 if tail_block is not None else 0)
        breakpoints = _place_prefix(spec, system, tools, budget)
        if tail_block is not None:
            tail_block["cache_control"] = dict(EPHEMERAL)
            breakpoints.append(TAIL)

    body: dict[str, Any] = {"model": spec.model, "max_tokens": spec.max_tokens}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    body["messages"] = messages
    if spec.stream:
        body["stream"] = True
    if spec.thinking is not None and "type" in spec.thinking and _loop_opener_thinks(messages, opener):
        body["thinking"] = {k: v for k, v in spec.thinking.items() if k not in THINKING_CONFIG_KEYS}
    temp = temperature(spec)
    if temp is not None:
        body["temperature"] = temp
    return Rendered(body, tuple(breakpoints))


def render_block(spec: RequestSpec, block: Block, where: str) -> dict[str, Any] | None:
    """One internal block as an Anthropic content block, or None when it is not sent (blank
    text, foreign thinking)."""
    if block["kind"] == "text":
        return None if is_blank_text(block) else {"type": "text", "text": block["text"]}
    if block["kind"] == "tool_use":
        return {
            "type": "tool_use",
            "id": block["id"],
            "name": block["name"],
            "input": parse_arguments(block["input"]),
        }
    if block["kind"] == "tool_result":
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block["tool_use_id"],
            "content": block["content"],
        }
        if block["is_error"]:
            out["is_error"] = True
        return out
    if block["kind"] == "thinking":
        if not thinking_kept(block, ANTHROPIC, spec.model):
            return None
        return {"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]}
    if block["kind"] == "redacted_thinking":
        if not thinking_kept(block, ANTHROPIC, spec.model):
            return None
        return {"type": "redacted_thinking", "data": block["data"]}
    # image (the only kind left after checked_messages)
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": block["media_type"],
            "data": image_data(spec, block, where),
        },
    }


def render_content(spec: RequestSpec, i: int, blocks: list[Block]) -> list[dict[str, Any]]:
    """The sent Anthropic content blocks of checked message `i` (empty when nothing is sent)."""
    content = []
    for j, block in enumerate(blocks):
        rendered = render_block(spec, block, f"messages[{i}].content[{j}]")
        if rendered is not None:
            content.append(rendered)
    return content


def _messages(spec: RequestSpec) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, (role, blocks) in enumerate(checked_messages(spec.messages)):
        content = render_content(spec, i, blocks)
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    return out


def loop_step(messages: list[dict[str, Any]], o: int, earlier: int) -> int:
    """One step of the walk back over a tool loop from wire message o: `earlier` (the walk's
    result from o-2) when message o-1 starts with a tool_result, else o."""
    if o >= 2 and messages[o - 1]["content"][0]["type"] == "tool_result":
        return earlier
    return o


def _loop_opener_thinks(messages: list[dict[str, Any]], opener: int | None = None) -> bool:
    """False when the request continues a tool loop whose opening assistant message starts with
    no thinking block (its thinking came from another model, or it was produced with thinking
    off). Anthropic refuses thinking-enabled requests in that state, so `render` then leaves the
    `thinking` config out for this request; the loop's next user turn turns it back on."""
    if not messages or messages[-1]["role"] != "user":
        return True
    if not any(b["type"] == "tool_result" for b in messages[-1]["content"]):
        return True
    if opener is None:
        opener = len(messages) - 2
        # walk back over assistant (tool_use) <- user (starting with tool_result) pairs
        while opener >= 2 and messages[opener - 1]["content"][0]["type"] == "tool_result":
            opener -= 2
    if opener < 0:
        return True
    return bool(messages[opener]["content"][0]["type"] in UNCACHEABLE)


def _tail_block(messages: list[dict[str, Any]], uncached: int = 0) -> dict[str, Any] | None:
    """The last block of the last message that may carry `cache_control`, before its last
    `uncached` blocks (`RequestSpec.uncached_tail`)."""
    if not messages:
        return None
    content = messages[-1]["content"]
    for block in reversed(content[: len(content) - uncached]):
        if block["type"] not in UNCACHEABLE:
            return block  # type: ignore[no-any-return]
    return None


def _place_prefix(
    spec: RequestSpec, system: list[dict[str, Any]], tools: list[dict[str, Any]], budget: int
) -> list[str]:
    """Mark the stable edges of the prefix; returns their labels in request order.

    The last sent segment is always an edge (it caches tools + the whole system). Further edges
    are the segments marked `edge=True` (an edge on a blank segment moves back to the nearest
    sent segment before it), earliest first, while the budget lasts: the earliest edges are the
    ones other runs of the same workspace or room share. With no system text, the last tool is
    the edge.
    """
    if budget <= 0:
        return []
    if not system:
        if tools:
            tools[-1]["cache_control"] = dict(EPHEMERAL)
            return [TOOLS]
        return []
    sent: list[tuple[int, str]] = []  # (index in `system`, slot) of each sent segment
    edges: list[int] = []
    for seg in spec.system:
        if is_sent(seg):
            sent.append((len(sent), seg.slot))
        if seg.edge and sent and sent[-1][0] not in edges:
            edges.append(sent[-1][0])
    last = sent[-1][0]
    chosen = [*[e for e in edges if e != last][: budget - 1], last]
    for index in chosen:
        system[index]["cache_control"] = dict(EPHEMERAL)
    return [sent[index][1] for index in sorted(chosen)]


def parse_reply(response: Mapping[str, Any]) -> list[Block]:
    """The blocks of an Anthropic Messages response (`{model, content: [...]}`).

    `tool_use.input` (an object) is stored as its compact orjson text; thinking and redacted
    thinking record `dialect: anthropic` and the response's `model`. Raises `E_INVALID_ARGS`
    naming `response.content[i]` for a block type runfold does not model.
    """
    model = response.get("model")
    by = model if isinstance(model, str) else None
    blocks: list[Block] = []
    for i, item in enumerate(need(response, "content", list, "response")):
        path = f"response.content[{i}]"
        kind = need(item, "type", str, path)
        if kind == "text":
            blocks.append(text_block(need(item, "text", str, path)))
        elif kind == "thinking":
            blocks.append(
                thinking_block(
                    need(item, "thinking", str, path), need(item, "signature", str, path), dialect=ANTHROPIC, model=by
                )
            )
        elif kind == "redacted_thinking":
            blocks.append(redacted_thinking_block(need(item, "data", str, path), dialect=ANTHROPIC, model=by))
        elif kind == "tool_use":
            arguments = orjson.dumps(need(item, "input", dict, path)).decode()
            blocks.append(
                tool_use_block(need(item, "id", str, path), need(item, "name", str, path), arguments)
            )
        else:
            raise invalid_args(
                f"read reply block of type {kind!r}",
                path,
                "runfold models text, thinking and tool_use replies",
            )
    return blocks
