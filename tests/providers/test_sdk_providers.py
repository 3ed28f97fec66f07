"""The SDK-backed providers (Anthropic, OpenAI Chat, OpenAI Responses, OpenAI-compatible) against
the provider test server: real HTTP through the official SDKs, bodies rendered by the core.

Each test checks what a run depends on: the bytes the server received are `request.body_bytes`
exactly; text, parallel tool calls (arguments verbatim), thinking with signatures and Responses
reasoning items come back as the internal blocks the scripted reply was made of; usage carries
cache tokens; faults surface as `ProviderError` with the right status, retry advice and
`retry_after_ms`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from provider_server import ProviderServer
from runfold.core.errors import Retry
from runfold.core.render import RequestSpec, SystemSegment, ToolSpec, render, request_bytes
from runfold.providers.anthropic import AnthropicProvider
from runfold.providers.base import Provider, ProviderError, Request
from runfold.providers.compat import OpenAICompatProvider
from runfold.providers.openai_chat import OpenAIChatProvider
from runfold.providers.openai_responses import OpenAIResponsesProvider

DIALECTS = ("anthropic", "openai-chat", "openai-responses")
MODEL = "test-model"
TOOL = ToolSpec(
    "read_file",
    "Read a file of the room.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
THINK = {"kind": "thinking", "thinking": "Both files first.", "signature": "EqQBsig/abc+==\u00e9"}
TEXT = {"kind": "text", "text": "Reading both — then I’ll compare them."}
CALL_A = {
    "kind": "tool_use",
    "id": "toolu_a1",
    "name": "read_file",
    "input": '{"path": "a.txt", "ratio": 1.50}',
}
CALL_B = {"kind": "tool_use", "id": "toolu_b2", "name": "read_file", "input": '{"path":"b/ü.txt"}'}
USAGE = {"input": 11, "output": 7, "cache_read": 100, "cache_write": 20}


def provider_for(dialect: str, server: ProviderServer, **kw: Any) -> Provider:
    key = kw.pop("api_key", "test-key")
    if dialect == "anthropic":
        return AnthropicProvider(MODEL, api_key=key, base_url=server.anthropic_url, **kw)
    if dialect == "openai-chat":
        return OpenAIChatProvider(MODEL, api_key=key, base_url=server.openai_url, **kw)
    return OpenAIResponsesProvider(MODEL, api_key=key, base_url=server.openai_url, **kw)


def make_request(dialect: str, *, stream: bool, messages: list[dict[str, Any]] | None = None) -> Request:
    thinking = {"type": "enabled", "budget_tokens": 1024} if dialect == "anthropic" else None
    spec = RequestSpec(
        model=MODEL,
        system=(SystemSegment("workspace", "You work in a test room.", edge=True),),
        tools=(TOOL,),
        messages=messages or [{"role": "user", "content": [{"kind": "text", "text": "Compare a and b."}]}],
        max_tokens=2048,
        cache_key="run-1" if dialect != "anthropic" else None,
        thinking=thinking,
        stream=stream,
    )
    body = render(dialect, spec)
    if dialect == "openai-responses":
        body["include"] = ["reasoning.encrypted_content"]
    return Request(dialect, MODEL, body, request_bytes(body), stream)


def run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


def complete(dialect: str, server: ProviderServer, request: Request, **kw: Any) -> Any:
    async def go() -> Any:
        provider = provider_for(dialect, server, **kw)
        deltas: list[tuple[str, str]] = []
        try:
            reply = await provider.complete(request, lambda kind, text: deltas.append((kind, text)))
        finally:
            await provider.aclose()
        return reply, deltas

    return run(go)


def expected_blocks(dialect: str, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each dialect can carry back: Chat drops thinking and puts text first; thinking is
    stamped with its dialect and the request's model (Responses also keeps the item id)."""
    out = []
    for b in blocks:
        if b["kind"] == "thinking":
            if dialect == "openai-chat":
                continue
            out.append({**b, "dialect": dialect, "model": MODEL})
        else:
            out.append(b)
    if dialect == "openai-chat":
        out.sort(key=lambda b: b["kind"] != "text")
    return out


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_thinking_text_and_parallel_calls_come_back_exact(dialect: str, stream: bool) -> None:
    reply_entry = {"content": [THINK, TEXT, CALL_A, CALL_B], "usage": USAGE}
    request = make_request(dialect, stream=stream)
    with ProviderServer([reply_entry], chunk=3) as server:
        reply, deltas = complete(dialect, server, request)
        received = server.requests[0]
    assert received.raw == request.body_bytes
    assert received.status == 200
    blocks = [dict(b) for b in reply.blocks]
    if dialect == "openai-responses":
        assert blocks[0].pop("id").startswith("rs_")
    want = expected_blocks(dialect, [THINK, TEXT, CALL_A, CALL_B])
    if dialect == "anthropic" and not stream:
        # a non-streamed Anthropic tool input arrives as an object: written compactly, numbers as sent
        want = [
            {**b, "input": json.dumps(json.loads(b["input"]), separators=(",", ":"), ensure_ascii=False)}
            if b["kind"] == "tool_use"
            else b
            for b in want
        ]
    assert blocks == want
    assert reply.stop == "tool_use"
    assert reply.usage is not None
    assert reply.usage.output == 7 and reply.usage.cache_read == 100
    if dialect == "anthropic":
        assert (reply.usage.input, reply.usage.cache_write) == (11, 20)
    elif dialect == "openai-responses":
        assert (reply.usage.input, reply.usage.cache_write) == (11, 20)
    else:  # Chat reports cached reads only: the written tokens count as input
        assert (reply.usage.input, reply.usage.cache_write) == (31, 0)
    assert reply.took_us is not None and reply.first_byte_us is not None
    assert reply.first_byte_us <= reply.took_us
    if stream:
        kinds = {k for k, _ in deltas}
        assert "text" in kinds and "tool_use" in kinds
        assert "".join(t for k, t in deltas if k == "text") == TEXT["text"]
        if dialect != "openai-chat":
            assert "thinking" in kinds
    else:
        assert deltas == []


def test_anthropic_stream_keeps_the_streamed_argument_text_verbatim() -> None:
    call = {**CALL_A, "input": '{ "path" : "a.txt",\n  "n": 1.0e2 }'}
    request = make_request("anthropic", stream=True)
    with ProviderServer([{"content": [call]}], chunk=2) as server:
        reply, _ = complete("anthropic", server, request)
    # the server streams the scripted text in 2-character pieces: their concatenation is kept
    assert reply.blocks[0]["input"] == call["input"]


def test_anthropic_whole_reply_keeps_number_spellings() -> None:
    from runfold.core.exact_json import dumps_exact, loads_exact

    raw = b'{"path":"\xc3\xbc","n":1.50,"big":12345678901234567890,"e":1e2,"l":[true,null]}'
    assert dumps_exact(loads_exact(raw)) == raw.decode()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_text_only_reply_and_max_tokens_stop(dialect: str) -> None:
    script = [{"content": [TEXT]}, {"content": [TEXT], "stop": "max_tokens"}]
    with ProviderServer(script) as server:
        first, _ = complete(dialect, server, make_request(dialect, stream=True))
        second, _ = complete(dialect, server, make_request(dialect, stream=False))
    assert first.blocks == [TEXT] and first.stop == "end_turn"
    assert second.blocks == [TEXT] and second.stop == "max_tokens"


@pytest.mark.parametrize("dialect", ["anthropic", "openai-responses"])
def test_thinking_round_trips_into_the_next_request_unedited(dialect: str) -> None:
    """The signature-checking server accepts the next request only when the thinking block it
    issued comes back byte-exact (Anthropic) / the reasoning item with its encrypted content."""
    script = [{"content": [THINK, CALL_A]}, {"content": [TEXT]}]
    with ProviderServer(script) as server:
        first, _ = complete(dialect, server, make_request(dialect, stream=True))
        history = [
            {"role": "user", "content": [{"kind": "text", "text": "Compare a and b."}]},
            {"role": "assistant", "content": first.blocks},
            {
                "role": "user",
                "content": [
                    {"kind": "tool_result", "tool_use_id": "toolu_a1", "content": "{}", "is_error": False}
                ],
            },
        ]
        second_request = make_request(dialect, stream=True, messages=history)
        second, _ = complete(dialect, server, second_request)
        received = server.requests[1]
    assert received.status == 200 and received.error is None
    assert received.raw == second_request.body_bytes
    assert second.blocks == [TEXT]
    if dialect == "anthropic":
        sent = received.body["messages"][1]["content"][0]
        assert sent == {"type": "thinking", "thinking": THINK["thinking"], "signature": THINK["signature"]}
    else:
        sent = received.body["input"][1]
        assert sent["type"] == "reasoning" and sent["encrypted_content"] == THINK["signature"]
        assert received.body["input"][2]["type"] == "function_call"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_429_with_retry_after_ms_is_retryable(dialect: str, stream: bool) -> None:
    with ProviderServer([{"fault": "http_429", "retry_after_ms": 1500}]) as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, make_request(dialect, stream=stream))
    err = info.value
    assert err.status == 429 and err.retry is Retry.YES
    assert err.retry_after_ms == 1500
    assert "429" in err.display()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_500_is_retryable_without_a_hint(dialect: str) -> None:
    with ProviderServer([{"fault": "http_500"}]) as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, make_request(dialect, stream=True))
    assert info.value.status == 500 and info.value.retry is Retry.YES


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_cut_stream_is_retryable(dialect: str, stream: bool) -> None:
    entry = {"fault": "cut_stream", "after_events": 3, "content": [TEXT, CALL_A]}
    with ProviderServer([entry]) as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, make_request(dialect, stream=stream))
    assert info.value.status is None and info.value.retry is Retry.YES


@pytest.mark.parametrize("dialect", DIALECTS)
def test_in_stream_error_event_is_retryable(dialect: str) -> None:
    entry = {"fault": "stream_error", "after_events": 2, "content": [TEXT]}
    with ProviderServer([entry]) as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, make_request(dialect, stream=True))
    assert info.value.status is None and info.value.retry is Retry.YES


@pytest.mark.parametrize("dialect", DIALECTS)
def test_400_refusal_is_not_retryable_and_carries_the_providers_message(dialect: str) -> None:
    with ProviderServer([{"fault": "http_400_refusal"}]) as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, make_request(dialect, stream=True))
    assert info.value.status == 400 and info.value.retry is Retry.NO


@pytest.mark.parametrize("dialect", DIALECTS)
def test_invalid_history_is_refused_with_the_servers_rule_message(dialect: str) -> None:
    """A body the server's rules refuse (here: a tool result with no call before it)."""
    history = [
        {
            "role": "user",
            "content": [
                {"kind": "tool_result", "tool_use_id": "nowhere", "content": "{}", "is_error": False}
            ],
        }
    ]
    request = make_request(dialect, stream=False, messages=history)
    with ProviderServer([{"content": [TEXT]}]) as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, request)
        message = server.requests[0].error
    assert info.value.status == 400 and info.value.retry is Retry.NO
    assert message and message in info.value.display()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_key_sends_no_credentials_and_the_401_names_the_variable(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ProviderServer([{"content": [TEXT]}]) as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, make_request(dialect, stream=True), api_key=None)
        headers = server.requests[0].headers
    assert "authorization" not in headers and "x-api-key" not in headers
    assert info.value.status == 401 and info.value.retry is Retry.NO
    env = "ANTHROPIC_API_KEY" if dialect == "anthropic" else "OPENAI_API_KEY"
    assert env in info.value.display()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_wrong_key_is_a_401(dialect: str) -> None:
    with ProviderServer([{"content": [TEXT]}], api_key="right") as server:
        with pytest.raises(ProviderError) as info:
            complete(dialect, server, make_request(dialect, stream=False), api_key="wrong")
    assert info.value.status == 401 and info.value.retry is Retry.NO


def test_unreachable_server_is_a_retryable_connection_error() -> None:
    with ProviderServer() as server:
        url = server.openai_url
    request = make_request("openai-chat", stream=True)

    async def go() -> None:
        provider = OpenAIChatProvider(MODEL, api_key="k", base_url=url, timeout_s=5)
        try:
            await provider.complete(request)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as info:
        run(go)
    assert info.value.status is None and info.value.retry is Retry.YES


def test_compat_provider_talks_chat_at_a_base_url_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    request = make_request("openai-chat", stream=True)
    with ProviderServer([{"content": [CALL_A, CALL_B]}]) as server:

        async def go() -> Any:
            provider = OpenAICompatProvider(MODEL, base_url=server.openai_url, api_key="local-key")
            try:
                return await provider.complete(request)
            finally:
                await provider.aclose()

        reply = run(go)
        received = server.requests[0]
    assert received.raw == request.body_bytes
    assert received.headers["authorization"] == "Bearer local-key"
    assert reply.blocks == [CALL_A, CALL_B] and reply.stop == "tool_use"
    assert OpenAICompatProvider(MODEL, base_url="http://127.0.0.1:1/v1").dialect == "openai-chat"
    with pytest.raises(Exception, match="E_INVALID_ARGS"):
        OpenAICompatProvider(MODEL, base_url="localhost:11434")


def test_retry_after_header_forms() -> None:
    from datetime import UTC, datetime

    from runfold.providers._sdk import retry_after_ms

    now = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert retry_after_ms({"retry-after-ms": "250.7"}) == 250
    assert retry_after_ms({"retry-after": "2"}) == 2000
    assert retry_after_ms({"retry-after": "Thu, 01 Jan 2026 00:00:03 GMT"}, now) == 3000
    assert retry_after_ms({"retry-after": "soon"}) is None
    assert retry_after_ms({}) is None


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_anthropic_redacted_thinking_comes_back_with_its_data(stream: bool) -> None:
    redacted = {"kind": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    with ProviderServer([{"content": [redacted, TEXT]}]) as server:
        reply, _ = complete("anthropic", server, make_request("anthropic", stream=stream))
    assert reply.blocks == [{**redacted, "dialect": "anthropic", "model": MODEL}, TEXT]


def test_refusals_and_failed_responses_map_to_provider_errors() -> None:
    from runfold.providers.openai_chat import reply_from_completion
    from runfold.providers.openai_responses import reply_from_response

    filtered = {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "content_filter", "message": {"content": "I can't"}}],
    }
    with pytest.raises(ProviderError) as info:
        reply_from_completion(filtered)
    assert info.value.retry is Retry.NO and "I can't" in info.value.display()

    failed = {"status": "failed", "error": {"code": "server_error", "message": "boom"}, "output": []}
    with pytest.raises(ProviderError) as info:
        reply_from_response(failed, MODEL)
    assert info.value.retry is Retry.YES and "boom" in info.value.display()
    bad = {"status": "failed", "error": {"code": "invalid_prompt", "message": "no"}, "output": []}
    with pytest.raises(ProviderError) as info:
        reply_from_response(bad, MODEL)
    assert info.value.retry is Retry.NO

    cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}
    assert reply_from_response(cut, MODEL).stop == "max_tokens"
    with pytest.raises(ProviderError):
        reply_from_response({**cut, "incomplete_details": {"reason": "content_filter"}}, MODEL)


def test_thinking_is_stamped_with_the_request_model_not_the_dated_echo() -> None:
    """The API echoes a dated snapshot name; the next request is rendered for the configured
    name, and thinking of another model would be dropped from the tool loop."""
    from runfold.providers.anthropic import reply_from_message
    from runfold.providers.openai_responses import reply_from_response

    message = {
        "model": "claude-x-20990101",
        "content": [{"type": "thinking", "thinking": "t", "signature": "s"}],
        "stop_reason": "end_turn",
    }
    assert reply_from_message(message, "claude-x").blocks[0]["model"] == "claude-x"
    response = {
        "model": "gpt-x-2099-01-01",
        "status": "completed",
        "output": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"}],
    }
    block = reply_from_response(response, "gpt-x").blocks[0]
    assert (block["model"], block["signature"], block["id"]) == ("gpt-x", "enc", "rs_1")


def test_an_async_delta_callback_is_awaited() -> None:
    request = make_request("openai-responses", stream=True)
    seen: list[tuple[str, str]] = []

    async def on_delta(kind: str, text: str) -> None:
        await asyncio.sleep(0)
        seen.append((kind, text))

    async def go(server: ProviderServer) -> Any:
        provider = provider_for("openai-responses", server)
        try:
            return await provider.complete(request, on_delta)
        finally:
            await provider.aclose()

    with ProviderServer([{"content": [THINK, TEXT]}], chunk=4) as server:
        reply = asyncio.run(go(server))
    assert "".join(t for k, t in seen if k == "text") == TEXT["text"]
    assert "".join(t for k, t in seen if k == "thinking") == THINK["thinking"]
    assert reply.stop == "end_turn"
