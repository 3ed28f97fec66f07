"""Anthropic Messages through the official `anthropic` SDK (DESIGN.md §8).

The run loop renders, validates and hashes the body; this provider POSTs exactly those bytes to
`/v1/messages` with the SDK's low-level `post` (its auth, headers, error classes and SSE decoding),
never letting the SDK retry (`max_retries=0`: every attempt is a `model_called` line). Streams are
assembled with the SDK's own `accumulate_event`; a tool call's `input` is kept as the JSON text the
model streamed, thinking blocks keep their signatures byte-exact.
"""

from __future__ import annotations

from typing import Any

from runfold.core.exact_json import dumps_exact, loads_exact
from runfold.core.messages import Block, redacted_thinking_block, text_block, thinking_block, tool_use_block
from runfold.providers._sdk import (
    Clock,
    SdkProvider,
    cut_stream,
    emit,
    map_sdk_error,
    refusal,
)
from runfold.providers.base import ProviderError, Reply, Request, StreamCallback, Usage

DIALECT = "anthropic"
PROVIDER = "Anthropic"
KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
COUNT_KEYS = ("model", "messages", "system", "tools", "tool_choice", "thinking")
"""The fields of a Messages body that `/v1/messages/count_tokens` takes."""


class AnthropicProvider(SdkProvider):
    """`anthropic:<model>`: the Anthropic Messages API. Constructor: see `SdkProvider`
    (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` without `/v1`, a client `anthropic.AsyncAnthropic`);
    `thinking` takes the Anthropic keys, e.g. `{type: enabled, budget_tokens: 2048}`."""

    SDK = "anthropic"
    CLIENT = "AsyncAnthropic"
    KEY_ENV = KEY_ENV
    BASE_URL_ENV = BASE_URL_ENV
    AUTH_HEADERS = ("X-Api-Key", "Authorization")
    dialect = DIALECT
    provider_name = PROVIDER

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        """POST `request.body_bytes` to `/v1/messages` and return the reply (streamed when the
        body asks for `stream: true`).

        Raises `ProviderError`: HTTP status errors with the provider's message (retryable for
        408/409/429/5xx, `retry_after_ms` from `retry-after-ms`/`retry-after`), connection errors
        and cut streams (status None, retryable), in-stream `error` events."""
        clock = Clock()
        try:
            if request.body.get("stream") is True:
                return await self._stream(request, clock, on_delta)
            raw = await self._client.post(
                "/v1/messages",
                cast_to=bytes,
                content=request.body_bytes,
                options={"headers": self._headers()},
            )
        except ProviderError:
            raise
        except Exception as err:
            raise map_sdk_error(err, provider=PROVIDER, key_hint=self._hint()) from err
        clock.first()
        reply = reply_from_message(loads_exact(raw), request.model)
        if reply.stop == "refusal":
            raise refusal(PROVIDER, reply.blocks, "stop_reason refusal")
        return Reply(reply.blocks, reply.stop, reply.usage, clock.first_byte_us, clock.took(), reply.raw)

    async def _stream(self, request: Request, clock: Clock, on_delta: StreamCallback | None) -> Reply:
        from anthropic.lib.streaming._messages import accumulate_event
        from anthropic.types import RawMessageStreamEvent

        stream = await self._client.post(
            "/v1/messages",
            cast_to=self._sdk.types.Message,
            content=request.body_bytes,
            options={"headers": self._headers()},
            stream=True,
            stream_cls=self._sdk.AsyncStream[RawMessageStreamEvent],
        )
        snapshot: Any = None
        json_bufs: dict[int, bytes] = {}
        stopped = False
        try:
            async for event in stream:
                clock.first()
                snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
                if event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        await emit(on_delta, "text", delta.text)
                    elif delta.type == "thinking_delta":
                        await emit(on_delta, "thinking", delta.thinking)
                    elif delta.type == "input_json_delta":
                        await emit(on_delta, "tool_use", delta.partial_json)
                elif event.type == "message_stop":
                    stopped = True
        finally:
            await stream.close()
        if snapshot is None or not stopped:
            raise cut_stream(PROVIDER, "message_stop")
        blocks: list[Block] = []
        for i, block in enumerate(snapshot.content):
            if block.type == "tool_use":
                text = json_bufs.get(i, b"").decode("utf-8")
                blocks.append(tool_use_block(block.id, block.name, text if text.strip() else "{}"))
            else:
                blocks.extend(_blocks([block.to_dict()], request.model))
        if snapshot.stop_reason == "refusal":
            raise refusal(PROVIDER, blocks, "stop_reason refusal")
        usage = snapshot.usage
        return Reply(
            blocks=blocks,
            stop=snapshot.stop_reason,
            usage=Usage(
                input=usage.input_tokens or 0,
                output=usage.output_tokens or 0,
                cache_read=usage.cache_read_input_tokens or 0,
                cache_write=usage.cache_creation_input_tokens or 0,
            ),
            first_byte_us=clock.first_byte_us,
            took_us=clock.took(),
            raw={"id": snapshot.id, "model": snapshot.model},
        )

    async def count_tokens(self, request: Request) -> int:
        """The input tokens Anthropic counts for `request`: its `model`, `messages`, `system`,
        `tools`, `tool_choice` and `thinking` (`COUNT_KEYS`) sent through the SDK's
        `messages.count_tokens` (POST `/v1/messages/count_tokens`, free of charge).

        Raises `ProviderError` as `complete` does (HTTP status, connection, a reply without
        `input_tokens`)."""
        fields = {k: request.body[k] for k in COUNT_KEYS if k in request.body}
        try:
            counted = await self._client.messages.count_tokens(**fields, extra_headers=self._headers())
        except Exception as err:
            raise map_sdk_error(err, provider=PROVIDER, key_hint=self._hint()) from err
        tokens = getattr(counted, "input_tokens", None)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise ProviderError(
                f"count the tokens ({PROVIDER} answered no input_tokens)", status=None, retryable=False
            )
        return tokens


def _blocks(content: list[Any], model: str) -> list[Block]:
    """Anthropic content blocks (JSON objects; numbers as `loads_exact` keeps them) as internal
    blocks. Thinking is stamped `dialect: anthropic` and `model` (the request's model name, the
    one the next request is rendered for); block types runfold does not model are skipped."""
    provenance = {"dialect": DIALECT, "model": model}
    out: list[Block] = []
    for item in content:
        kind = item.get("type")
        if kind == "text":
            out.append(text_block(str(item.get("text", ""))))
        elif kind == "thinking":
            out.append(
                thinking_block(str(item.get("thinking", "")), str(item.get("signature", "")), **provenance)
            )
        elif kind == "redacted_thinking":
            out.append(redacted_thinking_block(str(item.get("data", "")), **provenance))
        elif kind == "tool_use":
            out.append(tool_use_block(str(item["id"]), str(item["name"]), dumps_exact(item.get("input", {}))))
    return out


def _count(value: Any) -> int:
    return int(value) if value is not None else 0


def reply_from_message(message: dict[str, Any], model: str) -> Reply:
    """A non-streaming Messages response (parsed with `loads_exact`) as a `Reply`: blocks (tool
    input written compactly with the numbers as the API spelled them), stop reason, usage with
    `cache_read_input_tokens`/`cache_creation_input_tokens`."""
    usage = message.get("usage") or {}
    return Reply(
        blocks=_blocks(list(message.get("content") or []), model),
        stop=message.get("stop_reason"),
        usage=Usage(
            input=_count(usage.get("input_tokens")),
            output=_count(usage.get("output_tokens")),
            cache_read=_count(usage.get("cache_read_input_tokens")),
            cache_write=_count(usage.get("cache_creation_input_tokens")),
        ),
        raw={"id": str(message.get("id", "")), "model": str(message.get("model", ""))},
    )
