"""A scripted reply rendered as each provider answers it: the non-streaming JSON body and the
streamed events, in the exact shapes the official SDKs assemble.

Anthropic Messages (`message_start` … `message_stop`), OpenAI Chat Completions
(`chat.completion` / `chat.completion.chunk`), OpenAI Responses (`response` objects and the
`response.*` events). Thinking becomes Anthropic `thinking` blocks and Responses `reasoning`
items (summary = thinking text, `encrypted_content` = signature); Chat has no thinking and
drops it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .script import Reply, Usage
from .sse import DONE, named, pieces, unnamed


@dataclass(frozen=True)
class Ctx:
    """What a rendering needs besides the reply: request number `n` (ids are derived from it),
    model name, unix seconds `created`, usage, delta size in code points, and the request."""

    n: int
    model: str
    created: int
    usage: Usage
    chunk: int
    request: dict[str, Any]


# Anthropic Messages -------------------------------------------------------------------------


def _anthropic_usage(u: Usage, *, output: int) -> dict[str, Any]:
    return {
        "input_tokens": u.input,
        "cache_creation_input_tokens": u.cache_write,
        "cache_read_input_tokens": u.cache_read,
        "output_tokens": output,
    }


def _anthropic_block(b: dict[str, Any]) -> dict[str, Any]:
    kind = b["kind"]
    if kind == "text":
        return {"type": "text", "text": b["text"]}
    if kind == "thinking":
        return {"type": "thinking", "thinking": b["thinking"], "signature": b["signature"]}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": b["data"]}
    return {"type": "tool_use", "id": b["id"], "name": b["name"], "input": json.loads(b["input"])}


def anthropic_id(n: int) -> str:
    return f"msg_test{n:06d}"


def anthropic_message(reply: Reply, ctx: Ctx) -> dict[str, Any]:
    """The non-streaming `POST /v1/messages` answer."""
    return {
        "id": anthropic_id(ctx.n),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": [_anthropic_block(b) for b in reply.blocks],
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": _anthropic_usage(ctx.usage, output=ctx.usage.output),
    }


def anthropic_events(reply: Reply, ctx: Ctx) -> list[bytes]:
    """The streamed answer: `message_start`, `ping`, per block `content_block_start`,
    `content_block_delta` (`text_delta`, `input_json_delta`, `thinking_delta`, `signature_delta`),
    `content_block_stop`, then `message_delta` with the stop reason and usage, `message_stop`."""
    start: dict[str, Any] = {
        "id": anthropic_id(ctx.n),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(ctx.usage, output=1),
    }
    out = [
        named("message_start", {"type": "message_start", "message": start}),
        named("ping", {"type": "ping"}),
    ]
    for i, b in enumerate(reply.blocks):
        kind = b["kind"]
        if kind == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(b["text"], ctx.chunk)]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(b["thinking"], ctx.chunk)]
            deltas.append({"type": "signature_delta", "signature": b["signature"]})
        elif kind == "redacted_thinking":
            first = {"type": "redacted_thinking", "data": b["data"]}
            deltas = []
        else:
            first = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(b["input"], ctx.chunk)]
        out.append(
            named("content_block_start", {"type": "content_block_start", "index": i, "content_block": first})
        )
        for d in deltas:
            out.append(named("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}))
        out.append(named("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": ctx.usage.output},
    }
    out.append(named("message_delta", delta))
    out.append(named("message_stop", {"type": "message_stop"}))
    return out


def anthropic_stream_error(request_id: str) -> bytes:
    """The in-stream `error` event Anthropic sends when it fails after the 200 (overloaded)."""
    body = {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": request_id,
    }
    return named("error", body)


# OpenAI Chat Completions --------------------------------------------------------------------

CHAT_FINISH = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _chat_usage(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_total,
        "completion_tokens": u.output,
        "total_tokens": u.prompt_total + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_id(n: int) -> str:
    return f"chatcmpl-test{n:06d}"


def _chat_text(reply: Reply) -> str:
    return "".join(b["text"] for b in reply.blocks if b["kind"] == "text")


def _chat_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["input"]}}
        for b in reply.blocks
        if b["kind"] == "tool_use"
    ]


def chat_completion(reply: Reply, ctx: Ctx) -> dict[str, Any]:
    """The non-streaming `POST /v1/chat/completions` answer (text blocks joined into `content`;
    `content` is null when the reply only calls tools)."""
    calls = _chat_calls(reply)
    text = _chat_text(reply)
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or not calls else None,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        msg["tool_calls"] = calls
    return {
        "id": chat_id(ctx.n),
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [
            {"index": 0, "message": msg, "logprobs": None, "finish_reason": CHAT_FINISH[reply.stop_reason]}
        ],
        "usage": _chat_usage(ctx.usage),
        "service_tier": "default",
        "system_fingerprint": "fp_runfold_test",
    }


def chat_chunks(reply: Reply, ctx: Ctx) -> list[bytes]:
    """The streamed answer: `chat.completion.chunk`s (role, content pieces, `delta.tool_calls[index]`
    fragments: id/name first, then argument pieces), a finish chunk, a usage chunk with empty
    `choices` when `stream_options.include_usage`, then `[DONE]`."""
    opts = ctx.request.get("stream_options")
    with_usage = isinstance(opts, dict) and opts.get("include_usage") is True

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj: dict[str, Any] = {
            "id": chat_id(ctx.n),
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "service_tier": "default",
            "system_fingerprint": "fp_runfold_test",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if with_usage:
            obj["usage"] = None
        return unnamed(obj)

    calls = _chat_calls(reply)
    opening = "" if _chat_text(reply) or not calls else None  # tool-only replies stream null content
    out = [chunk({"role": "assistant", "content": opening, "refusal": None})]
    out += [chunk({"content": p}) for p in pieces(_chat_text(reply), ctx.chunk)]
    for i, call in enumerate(calls):
        head = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        out.append(chunk({"tool_calls": [head]}))
        for p in pieces(call["function"]["arguments"], ctx.chunk):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}))
    out.append(chunk({}, CHAT_FINISH[reply.stop_reason]))
    if with_usage:
        out.append(
            unnamed(
                {
                    "id": chat_id(ctx.n),
                    "object": "chat.completion.chunk",
                    "created": ctx.created,
                    "model": ctx.model,
                    "service_tier": "default",
                    "system_fingerprint": "fp_runfold_test",
                    "choices": [],
                    "usage": _chat_usage(ctx.usage),
                }
            )
        )
    out.append(DONE)
    return out


def chat_stream_error() -> bytes:
    """An in-stream error chunk as OpenAI sends it after the 200."""
    return unnamed(
        {
            "error": {
                "message": "The server had an error while processing your request. Sorry about that!",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    )


# OpenAI Responses ---------------------------------------------------------------------------


def response_id(n: int) -> str:
    return f"resp_test{n:06d}"


def _responses_usage(u: Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.prompt_total,
        "input_tokens_details": {"cached_tokens": u.cache_read, "cache_write_tokens": u.cache_write},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_total + u.output,
    }


def wants_encrypted_reasoning(request: dict[str, Any]) -> bool:
    """True when the request asked for `reasoning.encrypted_content` in `include` (the real API
    returns it only then)."""
    inc = request.get("include")
    return isinstance(inc, list) and "reasoning.encrypted_content" in inc


def responses_items(reply: Reply, ctx: Ctx) -> list[dict[str, Any]]:
    """The finished `output` items: `reasoning` (thinking; its `id` kept when it has one),
    `message` (consecutive text blocks are the `output_text` parts of one message) and
    `function_call` (`call_id` = the block's id)."""
    items: list[dict[str, Any]] = []
    encrypted = wants_encrypted_reasoning(ctx.request)
    for k, b in enumerate(reply.blocks):
        kind = b["kind"]
        if kind in ("thinking", "redacted_thinking"):
            summary = (
                [{"type": "summary_text", "text": b["thinking"]}]
                if kind == "thinking" and b["thinking"]
                else []
            )
            secret = b["signature"] if kind == "thinking" else b["data"]
            items.append(
                {
                    "id": b.get("id") or f"rs_test{ctx.n:06d}_{k}",
                    "type": "reasoning",
                    "summary": summary,
                    "encrypted_content": secret if encrypted else None,
                }
            )
        elif kind == "text":
            part = {"type": "output_text", "text": b["text"], "annotations": [], "logprobs": []}
            if items and items[-1]["type"] == "message":
                items[-1]["content"].append(part)
            else:
                items.append(
                    {
                        "id": f"msg_test{ctx.n:06d}_{k}",
                        "type": "message",
                        "status": "completed",
                        "role": "assistant",
                        "content": [part],
                    }
                )
        else:
            items.append(
                {
                    "id": f"fc_test{ctx.n:06d}_{k}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": b["id"],
                    "name": b["name"],
                    "arguments": b["input"],
                }
            )
    return items


def response_object(reply: Reply | None, ctx: Ctx, *, done: bool) -> dict[str, Any]:
    """A `response` object: finished (`done`) with output and usage, or the in-progress snapshot
    that `response.created` carries. `max_tokens` and `refusal` end `incomplete` (`max_output_tokens`,
    `content_filter`)."""
    req = ctx.request
    status = "in_progress"
    incomplete = None
    if done and reply is not None:
        reason = {"max_tokens": "max_output_tokens", "refusal": "content_filter"}.get(reply.stop_reason)
        status = "completed" if reason is None else "incomplete"
        if reason is not None:
            incomplete = {"reason": reason}
    return {
        "id": response_id(ctx.n),
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "background": False,
        "completed_at": ctx.created if done and status == "completed" else None,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": req.get("instructions"),
        "max_output_tokens": req.get("max_output_tokens"),
        "model": ctx.model,
        "output": responses_items(reply, ctx) if done and reply is not None else [],
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "previous_response_id": req.get("previous_response_id"),
        "prompt_cache_key": req.get("prompt_cache_key"),
        "reasoning": req.get("reasoning") or {"effort": None, "summary": None},
        "store": req.get("store", True),
        "temperature": req.get("temperature", 1.0),
        "text": req.get("text") or {"format": {"type": "text"}},
        "tool_choice": req.get("tool_choice", "auto"),
        "tools": req.get("tools", []),
        "top_p": req.get("top_p", 1.0),
        "truncation": req.get("truncation", "disabled"),
        "usage": _responses_usage(ctx.usage) if done else None,
        "metadata": req.get("metadata") or {},
    }


def responses_events(reply: Reply, ctx: Ctx) -> list[bytes]:
    """The streamed answer: `response.created`, `response.in_progress`, per item
    `response.output_item.added` … `response.output_item.done` (with `content_part`,
    `output_text.delta/done`, `function_call_arguments.delta/done`, `reasoning_summary_*` events
    in between), then `response.completed` (or `response.incomplete`). Every event carries a
    `sequence_number` counting from 0."""
    seq = 0
    out: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        nonlocal seq
        out.append(named(kind, {"type": kind, "sequence_number": seq, **fields}))
        seq += 1

    emit("response.created", response=response_object(None, ctx, done=False))
    emit("response.in_progress", response=response_object(None, ctx, done=False))
    for oi, item in enumerate(responses_items(reply, ctx)):
        iid = item["id"]
        if item["type"] == "message":
            emit(
                "response.output_item.added",
                output_index=oi,
                item={**item, "status": "in_progress", "content": []},
            )
            for ci, part in enumerate(item["content"]):
                emit(
                    "response.content_part.added",
                    item_id=iid,
                    output_index=oi,
                    content_index=ci,
                    part={**part, "text": ""},
                )
                for p in pieces(part["text"], ctx.chunk):
                    emit(
                        "response.output_text.delta",
                        item_id=iid,
                        output_index=oi,
                        content_index=ci,
                        delta=p,
                        logprobs=[],
                    )
                emit(
                    "response.output_text.done",
                    item_id=iid,
                    output_index=oi,
                    content_index=ci,
                    text=part["text"],
                    logprobs=[],
                )
                emit("response.content_part.done", item_id=iid, output_index=oi, content_index=ci, part=part)
        elif item["type"] == "function_call":
            emit(
                "response.output_item.added",
                output_index=oi,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for p in pieces(item["arguments"], ctx.chunk):
                emit("response.function_call_arguments.delta", item_id=iid, output_index=oi, delta=p)
            emit(
                "response.function_call_arguments.done",
                item_id=iid,
                output_index=oi,
                name=item["name"],
                arguments=item["arguments"],
            )
        else:
            emit("response.output_item.added", output_index=oi, item={**item, "summary": []})
            for si, part in enumerate(item["summary"]):
                emit(
                    "response.reasoning_summary_part.added",
                    item_id=iid,
                    output_index=oi,
                    summary_index=si,
                    part={**part, "text": ""},
                )
                for p in pieces(part["text"], ctx.chunk):
                    emit(
                        "response.reasoning_summary_text.delta",
                        item_id=iid,
                        output_index=oi,
                        summary_index=si,
                        delta=p,
                    )
                emit(
                    "response.reasoning_summary_text.done",
                    item_id=iid,
                    output_index=oi,
                    summary_index=si,
                    text=part["text"],
                )
                emit(
                    "response.reasoning_summary_part.done",
                    item_id=iid,
                    output_index=oi,
                    summary_index=si,
                    part=part,
                )
        emit("response.output_item.done", output_index=oi, item=item)
    final = response_object(reply, ctx, done=True)
    emit("response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final)
    return out


def responses_stream_error() -> bytes:
    """The Responses in-stream `error` event."""
    return named(
        "error",
        {
            "type": "error",
            "sequence_number": 0,
            "code": "server_error",
            "message": "The server had an error while processing your request. Sorry about that!",
            "param": None,
        },
    )


# Every dialect ------------------------------------------------------------------------------


def estimate_usage(reply: Reply, request_bytes: int) -> Usage:
    """Usage when the script gives none: about 4 bytes per token for the prompt and the reply."""
    out_chars = sum(len(v) for b in reply.blocks for k, v in b.items() if k != "kind" and isinstance(v, str))
    return Usage(input=max(1, request_bytes // 4), output=max(1, out_chars // 4))
