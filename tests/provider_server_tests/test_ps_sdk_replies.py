"""The provider test servers' replies, assembled by the official SDKs themselves.

Every test points `anthropic` / `openai` at a live `ProviderServer` by `base_url` and checks that
the SDK's own stream helpers and non-streaming parsers build exactly the scripted reply: text,
parallel tool calls (argument text byte-exact for OpenAI), thinking with its signature,
Responses reasoning items with `encrypted_content`, usage with cache tokens.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provider_server import ProviderServer

USER = [{"role": "user", "content": "go"}]
THINK = {"kind": "thinking", "thinking": "I should read both files first.", "signature": "EqQBsig/abc+=="}
CALL_A = {
    "kind": "tool_use",
    "id": "toolu_a1",
    "name": "read_file",
    "input": '{"path": "a.txt", "ratio": 1.50}',
}
CALL_B = {"kind": "tool_use", "id": "toolu_b2", "name": "read_file", "input": '{"path":"b/ü.txt"}'}
TEXT = {"kind": "text", "text": "Reading both files — then I'll compare them."}
TOOLS_ANTHROPIC = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
TOOLS_CHAT = [
    {
        "type": "function",
        "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
    }
]
TOOLS_RESPONSES = [
    {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}
]
USAGE = {"input": 11, "output": 7, "cache_read": 100, "cache_write": 20}


def ant(server: ProviderServer, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=server.anthropic_url, max_retries=0, **kw)


def oai(server: ProviderServer, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(api_key="test-key", base_url=server.openai_url, max_retries=0, **kw)


def anthropic_blocks(message: Any) -> list[dict[str, Any]]:
    """SDK content blocks back to internal blocks (tool input compared as parsed JSON)."""
    out: list[dict[str, Any]] = []
    for b in message.content:
        if b.type == "text":
            out.append({"kind": "text", "text": b.text})
        elif b.type == "thinking":
            out.append({"kind": "thinking", "thinking": b.thinking, "signature": b.signature})
        elif b.type == "redacted_thinking":
            out.append({"kind": "redacted_thinking", "data": b.data})
        else:
            out.append({"kind": "tool_use", "id": b.id, "name": b.name, "input": b.input})
    return out


def parsed(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**b, "input": json.loads(b["input"])} if b["kind"] == "tool_use" else b for b in blocks]


# Anthropic ------------------------------------------------------------------------------------


def test_anthropic_stream_assembles_thinking_text_and_parallel_calls() -> None:
    reply = {"content": [THINK, TEXT, CALL_A, CALL_B], "usage": USAGE}
    with ProviderServer([reply]) as server:
        with ant(server).messages.stream(
            model="claude-test", max_tokens=512, messages=USER, tools=TOOLS_ANTHROPIC
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        raw = server.requests[0].raw
    assert anthropic_blocks(final) == parsed(reply["content"])
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens == 11 and final.usage.output_tokens == 7
    assert final.usage.cache_read_input_tokens == 100 and final.usage.cache_creation_input_tokens == 20
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "thinking" in kinds and "signature" in kinds and "input_json" in kinds
    assert json.loads(raw)["stream"] is True


def test_anthropic_stream_input_json_deltas_concatenate_to_the_scripted_text() -> None:
    with ProviderServer([{"content": [CALL_A]}], chunk=3) as server:
        with ant(server).messages.stream(model="m", max_tokens=64, messages=USER) as stream:
            pieces = [e.partial_json for e in stream if e.type == "input_json"]
    assert len(pieces) > 3
    assert "".join(pieces) == CALL_A["input"]


def test_anthropic_non_streaming_reply_and_stop_reasons() -> None:
    script = [{"content": [TEXT]}, {"content": [TEXT], "stop": "max_tokens"}, {"content": [CALL_A]}]
    with ProviderServer(script) as server:
        client = ant(server)
        got = [client.messages.create(model="m", max_tokens=64, messages=USER) for _ in script]
    assert [m.stop_reason for m in got] == ["end_turn", "max_tokens", "tool_use"]
    assert anthropic_blocks(got[2]) == parsed([CALL_A])
    assert got[0].id != got[1].id and got[0].model == "m"


def test_anthropic_async_client_streams_too() -> None:
    async def go(server: ProviderServer) -> Any:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=server.anthropic_url, max_retries=0)
        async with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
            return await stream.get_final_message()

    with ProviderServer([{"content": [THINK, TEXT]}]) as server:
        final = asyncio.run(go(server))
    assert anthropic_blocks(final) == [THINK, TEXT]


# OpenAI Chat Completions ----------------------------------------------------------------------


def test_chat_raw_stream_fragments_assemble_parallel_calls_byte_exact() -> None:
    reply = {"content": [TEXT, CALL_A, CALL_B], "usage": USAGE}
    with ProviderServer([reply], chunk=4) as server:
        chunks = list(
            oai(server).chat.completions.create(
                model="gpt-test",
                messages=USER,
                tools=TOOLS_CHAT,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    text = ""
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for frag in choice.delta.tool_calls or []:
                call = calls.setdefault(frag.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += frag.id or ""
                call["name"] += (frag.function.name or "") if frag.function else ""
                call["arguments"] += (frag.function.arguments or "") if frag.function else ""
            finish = choice.finish_reason or finish
    assert text == TEXT["text"]
    assert [calls[0]["id"], calls[1]["id"]] == ["toolu_a1", "toolu_b2"]
    assert [calls[0]["arguments"], calls[1]["arguments"]] == [CALL_A["input"], CALL_B["input"]]
    assert finish == "tool_calls"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.prompt_tokens == 131 and last.usage.completion_tokens == 7
    assert (
        last.usage.prompt_tokens_details is not None and last.usage.prompt_tokens_details.cached_tokens == 100
    )
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_helper_final_completion() -> None:
    with ProviderServer([{"content": [THINK, CALL_A, CALL_B]}]) as server:
        with oai(server).chat.completions.stream(model="m", messages=USER, tools=TOOLS_CHAT) as stream:
            final = stream.get_final_completion()
    msg = final.choices[0].message
    assert msg.content is None  # thinking is dropped in Chat, the reply only calls tools
    assert [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []] == [
        ("toolu_a1", "read_file", CALL_A["input"]),
        ("toolu_b2", "read_file", CALL_B["input"]),
    ]
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_without_include_usage_sends_no_usage_chunk() -> None:
    with ProviderServer([{"content": [TEXT]}]) as server:
        chunks = list(oai(server).chat.completions.create(model="m", messages=USER, stream=True))
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"


def test_chat_non_streaming_and_length_stop() -> None:
    with ProviderServer(
        [{"content": [TEXT, CALL_A], "usage": USAGE}, {"content": [TEXT], "stop": "max_tokens"}]
    ) as server:
        client = oai(server)
        first = client.chat.completions.create(model="m", messages=USER, tools=TOOLS_CHAT)
        second = client.chat.completions.create(model="m", messages=USER)
    assert first.choices[0].message.content == TEXT["text"]
    assert first.choices[0].message.tool_calls is not None
    assert first.choices[0].message.tool_calls[0].function.arguments == CALL_A["input"]
    assert first.usage is not None and first.usage.total_tokens == 138
    assert second.choices[0].finish_reason == "length"


def test_refusal_stop_in_each_dialect() -> None:
    refused = {"content": [TEXT], "stop": "refusal"}
    with ProviderServer([refused] * 3) as server:
        a = ant(server).messages.create(model="m", max_tokens=64, messages=USER)
        c = oai(server).chat.completions.create(model="m", messages=USER)
        r = oai(server).responses.create(model="m", input="go")
    assert a.stop_reason == "refusal"
    assert c.choices[0].finish_reason == "content_filter"
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "content_filter"


# OpenAI Responses -----------------------------------------------------------------------------


def responses_blocks(response: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in response.output:
        if item.type == "reasoning":
            text = "".join(s.text for s in item.summary)
            out.append(
                {"kind": "thinking", "thinking": text, "signature": item.encrypted_content, "id": item.id}
            )
        elif item.type == "message":
            out += [{"kind": "text", "text": part.text} for part in item.content]
        else:
            out.append({"kind": "tool_use", "id": item.call_id, "name": item.name, "input": item.arguments})
    return out


def test_responses_stream_helper_reasoning_and_calls() -> None:
    think = {**THINK, "id": "rs_keep1"}
    with ProviderServer([{"content": [think, TEXT, CALL_A, CALL_B], "usage": USAGE}]) as server:
        with oai(server).responses.stream(
            model="gpt-test",
            input="go",
            tools=TOOLS_RESPONSES,
            include=["reasoning.encrypted_content"],
            store=False,
        ) as stream:
            kinds = [e.type for e in stream]
            final = stream.get_final_response()
    assert responses_blocks(final) == [think, TEXT, CALL_A, CALL_B]
    assert final.status == "completed" and final.usage is not None
    assert final.usage.input_tokens == 131 and final.usage.input_tokens_details.cached_tokens == 100
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    for needed in (
        "response.output_item.added",
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_summary_text.delta",
        "response.output_item.done",
    ):
        assert needed in kinds


def test_responses_encrypted_content_only_when_included() -> None:
    with ProviderServer([{"content": [THINK, TEXT]}] * 2) as server:
        client = oai(server)
        plain = client.responses.create(model="m", input="go")
        asked = client.responses.create(model="m", input="go", include=["reasoning.encrypted_content"])
    assert plain.output[0].type == "reasoning" and plain.output[0].encrypted_content is None
    assert asked.output[0].type == "reasoning" and asked.output[0].encrypted_content == THINK["signature"]


def test_responses_raw_stream_sequence_numbers_and_incomplete() -> None:
    with ProviderServer([{"content": [TEXT], "stop": "max_tokens"}]) as server:
        events = list(oai(server).responses.create(model="m", input="go", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details is not None
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


# The script is what the SDK sees, for any reply -----------------------------------------------

json_leaf = st.one_of(st.integers(-(10**12), 10**12), st.text(max_size=8), st.booleans(), st.none())
args = st.dictionaries(st.text(min_size=1, max_size=6), json_leaf, max_size=4).map(
    lambda d: json.dumps(d, ensure_ascii=False)
)
visible = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != "")
blocks = st.lists(
    st.one_of(
        visible.map(lambda t: {"kind": "text", "text": t}),
        st.builds(
            lambda n, a: {"kind": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": a},
            st.integers(0, 10**6),
            args,
        ),
    ),
    min_size=1,
    max_size=5,
).filter(
    lambda bs: (
        len({b.get("id") for b in bs if b["kind"] == "tool_use"}) == sum(b["kind"] == "tool_use" for b in bs)
    )
)


@pytest.fixture(scope="module")
def shared() -> Any:
    """One server and one client per SDK for every example (SDK clients are slow to build)."""
    with ProviderServer([], chunk=5) as server:
        yield server, ant(server), oai(server)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=blocks, thinking=st.booleans())
def test_every_sdk_assembles_the_scripted_reply(
    shared: Any, content: list[dict[str, Any]], thinking: bool
) -> None:
    server, client, o = shared
    content = ([THINK] if thinking else []) + content
    server.push(*[{"content": content}] * 4)
    with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        assert anthropic_blocks(stream.get_final_message()) == parsed(content)
    assert anthropic_blocks(client.messages.create(model="m", max_tokens=64, messages=USER)) == parsed(
        content
    )

    with o.chat.completions.stream(model="m", messages=USER) as cs:
        msg = cs.get_final_completion().choices[0].message
    texts = "".join(b["text"] for b in content if b["kind"] == "text")
    assert (msg.content or "") == texts
    assert [c.function.arguments for c in msg.tool_calls or []] == [
        b["input"] for b in content if b["kind"] == "tool_use"
    ]

    with o.responses.stream(model="m", input="go", include=["reasoning.encrypted_content"]) as rs:
        got = responses_blocks(rs.get_final_response())
    assert [{k: v for k, v in b.items() if k != "id" or b["kind"] != "thinking"} for b in got] == content
