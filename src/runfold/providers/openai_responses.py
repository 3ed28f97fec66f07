"""OpenAI Responses through the official `openai` SDK (DESIGN.md §8).

The exact body bytes go to `/responses` with the SDK's low-level `post`. The streamed events are
read as the SDK's typed events; the finished items (from `response.completed`, or the
`response.output_item.done` events when the final response carries none) become internal blocks
through `core.render.parse_reply`, so reasoning items keep their `encrypted_content` as a thinking
block's signature, grouped with the item that follows them, exactly as the renderer sends them back.
"""

from __future__ import annotations

import json
from typing import Any

from runfold.core.render import OPENAI_RESPONSES, parse_reply
from runfold.providers._sdk import Clock, cut_stream, emit, map_sdk_error, refusal
from runfold.providers.base import ProviderError, Reply, Request, StreamCallback, Usage
from runfold.providers.openai_chat import OpenAIBase

DELTA_KINDS = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "text",
    "response.reasoning_summary_text.delta": "thinking",
    "response.reasoning_text.delta": "thinking",
    "response.function_call_arguments.delta": "tool_use",
}
"""Streamed delta events → the block kind reported to the live view."""
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


class OpenAIResponsesProvider(OpenAIBase):
    """`openai-responses:<model>`: the OpenAI Responses API (constructor: see `OpenAIBase`)."""

    dialect = OPENAI_RESPONSES

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        """POST `request.body_bytes` to `/responses` and return the reply.

        Stop: `tool_use` when the reply holds function calls, else `end_turn`; `max_tokens` for
        `incomplete` (`max_output_tokens`). Raises `ProviderError`: HTTP errors (retryable for
        408/409/429/5xx, with `retry_after_ms`), connection errors, cut streams, `error` events and
        `response.failed` with a server error (retryable, status None); a `content_filter`
        refusal or another failure (not retryable)."""
        from openai.types.responses import Response, ResponseStreamEvent

        clock = Clock()
        try:
            out = await self._post("/responses", request, Response, ResponseStreamEvent)
            if isinstance(out, bytes):
                clock.first()
                response = json.loads(out)
            else:
                response = await self._assemble(out, clock, on_delta)
            reply = reply_from_response(response, request.model, self.provider_name)
        except ProviderError:
            raise
        except Exception as err:
            raise map_sdk_error(err, provider=self.provider_name, key_hint=self._hint()) from err
        return Reply(reply.blocks, reply.stop, reply.usage, clock.first_byte_us, clock.took(), reply.raw)

    async def _assemble(self, stream: Any, clock: Clock, on_delta: StreamCallback | None) -> dict[str, Any]:
        items: dict[int, dict[str, Any]] = {}
        final: dict[str, Any] | None = None
        try:
            async for event in stream:
                clock.first()
                kind = event.type
                if kind in DELTA_KINDS:
                    await emit(on_delta, DELTA_KINDS[kind], event.delta)
                elif kind == "response.output_item.done":
                    items[event.output_index] = event.item.to_dict()
                elif kind in FINAL_EVENTS:
                    final = event.response.to_dict()
                elif kind == "error":
                    code = getattr(event, "code", None)
                    message = getattr(event, "message", "") or "error event"
                    raise ProviderError(
                        f"{self.provider_name} stream error {code or ''}: {message}".replace("  ", " "),
                        status=None,
                        retryable=code not in ("invalid_request_error", "invalid_prompt"),
                    )
        finally:
            await stream.close()
        if final is None:
            raise cut_stream(self.provider_name, "response.completed")
        if not final.get("output") and items:
            final["output"] = [items[i] for i in sorted(items)]
        return final


def responses_usage(usage: Any) -> Usage | None:
    """Responses `usage` → `Usage`: `cache_read` = `input_tokens_details.cached_tokens`,
    `cache_write` = `input_tokens_details.cache_write_tokens` when reported, `input` = the rest of
    `input_tokens`. None when absent."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    return Usage(
        input=max(0, int(usage.get("input_tokens") or 0) - cached - written),
        output=int(usage.get("output_tokens") or 0),
        cache_read=cached,
        cache_write=written,
    )


def reply_from_response(response: dict[str, Any], model: str, provider: str = "OpenAI") -> Reply:
    """A finished `response` object as a `Reply`. Reasoning blocks are stamped with `model` (the
    request's model name, which the next request is rendered for) rather than the dated name the
    API echoes, so they are kept in the tool loop. Raises `ProviderError` for `failed` (retryable
    on a server error) and a `content_filter` stop (not retryable)."""
    status = response.get("status")
    if status == "failed":
        error = response.get("error") or {}
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise ProviderError(
            f"{provider} response failed ({code}): {message or 'no message'}",
            status=None,
            retryable=code in (None, "server_error", "rate_limit_exceeded"),
        )
    blocks = parse_reply(OPENAI_RESPONSES, {**response, "model": model})
    reason = (response.get("incomplete_details") or {}).get("reason")
    if status == "incomplete" and reason == "content_filter":
        raise refusal(provider, blocks, "incomplete: content_filter")
    if status == "incomplete":
        stop = "max_tokens" if reason in (None, "max_output_tokens") else str(reason)
    else:
        stop = "tool_use" if any(b["kind"] == "tool_use" for b in blocks) else "end_turn"
    meta = {"id": str(response.get("id", "")), "model": str(response.get("model", ""))}
    return Reply(blocks, stop, responses_usage(response.get("usage")), raw=meta)
