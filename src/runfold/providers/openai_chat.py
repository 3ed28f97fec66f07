"""OpenAI Chat Completions through the official `openai` SDK (DESIGN.md §8).

The rendered, validated and hashed body is POSTed byte for byte to `/chat/completions` with the
SDK's low-level `post` (its auth, error classes and SSE decoding; `max_retries=0` because the run
loop retries and records every attempt). Streamed chunks are assembled per tool-call `index` with
the `arguments` text kept verbatim; usage comes from the final chunk (`stream_options.include_usage`
is in the body already) with `prompt_tokens_details.cached_tokens` as cache reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runfold.core.messages import Block, text_block, tool_use_block
from runfold.core.render import OPENAI_CHAT, parse_reply
from runfold.providers._sdk import Clock, SdkProvider, cut_stream, emit, map_sdk_error, refusal
from runfold.providers.base import ProviderError, Reply, Request, StreamCallback, Usage

PROVIDER = "OpenAI"
KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
FINISH_TO_STOP = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}
"""Chat `finish_reason` → the internal stop vocabulary (`content_filter` is a refusal)."""


class OpenAIBase(SdkProvider):
    """The `openai` client (`openai.AsyncOpenAI`) and the exact-bytes POST shared by the Chat
    and Responses providers. Constructor: see `SdkProvider` (`OPENAI_API_KEY`, `OPENAI_BASE_URL`,
    whose default includes `/v1`; an OpenAI-compatible server may need no key); `thinking` takes
    the OpenAI keys, e.g. `{effort: low, summary: auto}`."""

    SDK = "openai"
    CLIENT = "AsyncOpenAI"
    KEY_ENV = KEY_ENV
    BASE_URL_ENV = BASE_URL_ENV
    dialect = OPENAI_CHAT
    provider_name = PROVIDER

    async def _post(self, path: str, request: Request, cast_to: Any, stream_cls: Any) -> Any:
        """POST the exact body bytes; a stream object when the body asks to stream, else bytes."""
        if request.body.get("stream") is True:
            return await self._client.post(
                path,
                cast_to=cast_to,
                content=request.body_bytes,
                options={"headers": self._headers()},
                stream=True,
                stream_cls=self._sdk.AsyncStream[stream_cls],
            )
        return await self._client.post(
            path, cast_to=bytes, content=request.body_bytes, options={"headers": self._headers()}
        )


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAIChatProvider(OpenAIBase):
    """`openai:<model>`: OpenAI Chat Completions (constructor: see `OpenAIBase`)."""

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        """POST `request.body_bytes` to `/chat/completions` and return the reply.

        Stop reasons are mapped to `end_turn`/`tool_use`/`max_tokens`. Raises `ProviderError`:
        HTTP errors with the provider's message (retryable for 408/409/429/5xx, with
        `retry_after_ms`), connection errors, cut streams and in-stream error chunks (retryable,
        status None), `content_filter` (a refusal, not retryable)."""
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        clock = Clock()
        try:
            out = await self._post("/chat/completions", request, ChatCompletion, ChatCompletionChunk)
            if isinstance(out, bytes):
                clock.first()
                reply = reply_from_completion(json.loads(out), self.provider_name)
            else:
                reply = await self._assemble(out, clock, on_delta)
        except ProviderError:
            raise
        except Exception as err:
            raise map_sdk_error(err, provider=self.provider_name, key_hint=self._hint()) from err
        return Reply(reply.blocks, reply.stop, reply.usage, clock.first_byte_us, clock.took(), reply.raw)

    async def _assemble(self, stream: Any, clock: Clock, on_delta: StreamCallback | None) -> Reply:
        text: list[str] = []
        calls: dict[int, _Call] = {}
        finish: str | None = None
        usage: Any = None
        meta: dict[str, Any] = {}
        try:
            async for chunk in stream:
                clock.first()
                meta = {"id": chunk.id, "model": chunk.model}
                if chunk.usage is not None:
                    usage = chunk.usage.to_dict()
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        await emit(on_delta, "text", delta.content)
                    if delta.refusal:
                        text.append(delta.refusal)
                    for n, piece in enumerate(delta.tool_calls or []):
                        index = piece.index if piece.index is not None else n
                        call = calls.setdefault(index, _Call())
                        if piece.id:
                            call.id = piece.id
                        fn = piece.function
                        if fn is not None:
                            if fn.name:
                                call.name = fn.name
                            if fn.arguments:
                                call.arguments.append(fn.arguments)
                                await emit(on_delta, "tool_use", fn.arguments)
                    if choice.finish_reason is not None:
                        finish = choice.finish_reason
        finally:
            await stream.close()
        if finish is None:
            raise cut_stream(self.provider_name, "a finish_reason")
        blocks: list[Block] = []
        joined = "".join(text)
        if joined:
            blocks.append(text_block(joined))
        for index in sorted(calls):
            call = calls[index]
            blocks.append(
                tool_use_block(call.id or f"call_{index}", call.name, "".join(call.arguments) or "{}")
            )
        if finish == "content_filter":
            raise refusal(self.provider_name, blocks, "finish_reason content_filter")
        return Reply(blocks, FINISH_TO_STOP.get(finish, finish), chat_usage(usage), raw=meta)


def chat_usage(usage: Any) -> Usage | None:
    """Chat `usage` → `Usage`: `input` = prompt tokens not served from the cache, `cache_read` =
    `prompt_tokens_details.cached_tokens`, `output` = `completion_tokens`. None when absent."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    prompt = int(usage.get("prompt_tokens") or 0)
    return Usage(
        input=max(0, prompt - cached),
        output=int(usage.get("completion_tokens") or 0),
        cache_read=cached,
    )


def reply_from_completion(completion: dict[str, Any], provider: str = PROVIDER) -> Reply:
    """A non-streaming `chat.completion` as a `Reply` (blocks by `core.render.parse_reply`,
    arguments verbatim). Raises `ProviderError` for `content_filter` (a refusal) and
    `E_INVALID_ARGS` when the response has no choice."""
    blocks = parse_reply(OPENAI_CHAT, completion)
    finish = (completion.get("choices") or [{}])[0].get("finish_reason")
    if finish == "content_filter":
        raise refusal(provider, blocks, "finish_reason content_filter")
    stop = FINISH_TO_STOP.get(finish, finish) if isinstance(finish, str) else None
    meta = {"id": str(completion.get("id", "")), "model": str(completion.get("model", ""))}
    return Reply(blocks, stop, chat_usage(completion.get("usage")), raw=meta)
