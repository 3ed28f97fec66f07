"""The provider test servers refuse what the real APIs refuse: status, error body shape and the
provider's own wording, raised by the official SDKs as the exceptions they raise in the field.

Histories come from tests/fixtures/histories (copied from the shared fixtures): every invalid
one is refused with a 400 carrying its `provider_error` quote, every valid one is answered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider_server import ProviderServer, check_anthropic

HISTORIES = Path(__file__).resolve().parent.parent / "fixtures" / "histories"
INVALID = sorted((HISTORIES / "invalid").glob("*.json"))
VALID = sorted((HISTORIES / "valid").glob("*.json"))
OK = {"content": [{"kind": "text", "text": "ok"}]}


def send(server: ProviderServer, dialect: str, request: dict[str, Any], **client_kw: Any) -> Any:
    """Send `request` through the official SDK of `dialect`, non-streaming."""
    if dialect == "anthropic":
        client = anthropic.Anthropic(api_key="k", base_url=server.anthropic_url, max_retries=0, **client_kw)
        return client.messages.create(**request)
    oclient = openai.OpenAI(api_key="k", base_url=server.openai_url, max_retries=0, **client_kw)
    if dialect == "openai-chat":
        return oclient.chat.completions.create(**request)
    return oclient.responses.create(**request)


def test_fixtures_are_present() -> None:
    assert len(INVALID) >= 9 and len(VALID) >= 4


@pytest.mark.filterwarnings("ignore:The model:DeprecationWarning")
@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_history_is_refused_with_the_providers_message(path: Path) -> None:
    fixture = json.loads(path.read_text())
    dialect = fixture["dialect"]
    with ProviderServer([OK]) as server:
        error_cls = anthropic.BadRequestError if dialect == "anthropic" else openai.BadRequestError
        with pytest.raises(error_cls) as caught:
            send(server, dialect, fixture["request"])
        assert server.remaining == 1  # a refused request takes no reply
        [rec] = server.requests
    err = caught.value
    assert err.status_code == 400
    body = err.body
    assert isinstance(body, dict)
    if dialect == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"].startswith("messages")
        message = body["error"]["message"]
    else:
        # the SDK hands over the inner error object
        assert set(body) == {"message", "type", "param", "code"}
        assert body["type"] == "invalid_request_error" and body["param"].startswith("messages")
        message = body["message"]
    assert fixture["provider_error"] in message
    assert rec.status == 400 and rec.error == message and rec.entry is None
    assert json.loads(rec.raw) == rec.body


@pytest.mark.filterwarnings("ignore:The model:DeprecationWarning")
@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_history_is_answered(path: Path) -> None:
    fixture = json.loads(path.read_text())
    with ProviderServer([OK]) as server:
        reply = send(server, fixture["dialect"], fixture["request"])
        [rec] = server.requests
    assert rec.status == 200 and rec.entry == 0 and rec.error is None
    assert rec.body == json.loads(json.dumps(fixture["request"]))
    text = reply.content[0].text if fixture["dialect"] == "anthropic" else None
    text = text or (
        reply.choices[0].message.content if fixture["dialect"] == "openai-chat" else reply.output_text
    )
    assert text == "ok"


def raw_post(server: ProviderServer, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        server.base_url + path, content=data, headers={"content-type": "application/json", **headers}
    )


ANTHROPIC_H = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
OPENAI_H = {"authorization": "Bearer k"}
MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": MSG, "max_tokens": 5}, "model: Field required"),
        ({"model": "m", "messages": MSG}, "max_tokens: Field required"),
        ({"model": "m", "messages": [], "max_tokens": 5}, "messages: at least one message is required"),
        (
            {"model": "m", "messages": MSG, "max_tokens": 0},
            "max_tokens: Input should be greater than or equal to 1",
        ),
        (
            {"model": "m", "messages": [{"role": "system", "content": "x"}], "max_tokens": 5},
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        (
            {"model": "m", "messages": MSG, "max_tokens": 5, "bogus": 1},
            "bogus: Extra inputs are not permitted",
        ),
        (
            {"model": "m", "messages": [{"role": "assistant", "content": "x"}], "max_tokens": 5},
            'first message must use the "user" role',
        ),
        (
            {"model": "m", "messages": [*MSG, *MSG], "max_tokens": 5},
            'roles must alternate between "user" and "assistant"',
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "  \n"}], "max_tokens": 5},
            "text content blocks must contain non-whitespace text",
        ),
    ],
)
def test_anthropic_schema_refusals(body: dict[str, Any], message: str) -> None:
    with ProviderServer([OK]) as server:
        resp = raw_post(server, "/v1/messages", body, ANTHROPIC_H)
    assert resp.status_code == 400
    got = resp.json()
    assert got["type"] == "error" and got["error"]["type"] == "invalid_request_error"
    assert message in got["error"]["message"]
    assert got["request_id"] == resp.headers["request-id"]


@pytest.mark.parametrize(
    ("path", "body", "message", "param"),
    [
        ("/v1/chat/completions", {"messages": MSG}, "you must provide a model parameter", None),
        ("/v1/chat/completions", {"model": "m"}, "Missing required parameter: 'messages'.", "messages"),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": []},
            "Invalid 'messages': empty array.",
            "messages",
        ),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
            "Invalid value: 'robot'.",
            "messages[0].role",
        ),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": MSG, "stream_options": {"include_usage": True}},
            "'stream_options' parameter is only allowed when 'stream' is enabled",
            "stream_options",
        ),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": MSG, "bogus": 1},
            "Unrecognized request argument supplied: bogus",
            None,
        ),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": [*MSG, {"role": "assistant", "content": None}]},
            "Invalid value for 'content': expected a string, got null.",
            "messages.[1].content",
        ),
        ("/v1/responses", {"input": "hi"}, "Missing required parameter: 'model'.", "model"),
        ("/v1/responses", {"model": "m", "input": "hi", "bogus": 1}, "Unknown parameter: 'bogus'.", "bogus"),
        (
            "/v1/responses",
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]},
            "No tool call found for function call output with call_id call_9.",
            "input",
        ),
        (
            "/v1/responses",
            {
                "model": "m",
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                ],
            },
            "No tool output found for function call c1.",
            "input",
        ),
        (
            "/v1/responses",
            {
                "model": "m",
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "reasoning", "id": "rs_1", "summary": []},
                ],
            },
            "Item 'rs_1' of type 'reasoning' was provided without its required following item.",
            "input",
        ),
        (
            "/v1/responses",
            {
                "model": "m",
                "store": False,
                "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "reasoning", "id": "rs_1", "summary": []},
                    {"role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
                ],
            },
            "Items are not persisted when `store` is set to false.",
            "input",
        ),
        (
            "/v1/responses",
            {
                "model": "m",
                "input": [
                    {"role": "user", "content": "hi"},
                    {
                        "type": "function_call",
                        "id": "call_1",
                        "call_id": "call_1",
                        "name": "f",
                        "arguments": "{}",
                    },
                ],
            },
            "Expected an ID that begins with 'fc'.",
            "input[1].id",
        ),
        (
            "/v1/responses",
            {
                "model": "m",
                "input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}],
            },
            "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.",
            "input[0].content[0]",
        ),
    ],
)
def test_openai_schema_refusals(path: str, body: dict[str, Any], message: str, param: str | None) -> None:
    with ProviderServer([OK]) as server:
        resp = raw_post(server, path, body, OPENAI_H)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert message in err["message"] and err["param"] == param and err["type"] == "invalid_request_error"


def test_malformed_json_is_refused_in_each_shape() -> None:
    with ProviderServer([OK]) as server:
        a = raw_post(server, "/v1/messages", b"{not json", ANTHROPIC_H)
        o = raw_post(server, "/v1/chat/completions", b"{not json", OPENAI_H)
    assert a.status_code == o.status_code == 400
    assert a.json()["error"]["type"] == "invalid_request_error"
    assert "could not parse the JSON body" in o.json()["error"]["message"]


# Thinking ---------------------------------------------------------------------------------------

THINK = {"kind": "thinking", "thinking": "Read a.txt first.", "signature": "sig-issued-1"}
CALL = {"kind": "tool_use", "id": "toolu_1", "name": "read_file", "input": '{"path":"a.txt"}'}
TOOLS = [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}]


def loop_request(thinking_block: dict[str, Any] | None) -> dict[str, Any]:
    first = [thinking_block] if thinking_block else []
    return {
        "model": "m",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "read a"},
            {
                "role": "assistant",
                "content": [
                    *first,
                    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}],
            },
        ],
    }


def test_thinking_block_kept_byte_exact_is_accepted_and_an_edited_one_refused() -> None:
    with ProviderServer([{"content": [THINK, CALL]}, OK, OK]) as server:
        client = anthropic.Anthropic(api_key="k", base_url=server.anthropic_url, max_retries=0)
        first = client.messages.create(
            model="m", max_tokens=2048, messages=[{"role": "user", "content": "read a"}], tools=TOOLS
        )
        kept = first.content[0].model_dump(exclude_none=True)
        assert client.messages.create(**loop_request(kept)).content[0].text == "ok"
        with pytest.raises(anthropic.BadRequestError) as edited:
            client.messages.create(**loop_request({**kept, "thinking": "Read b.txt first."}))
        with pytest.raises(anthropic.BadRequestError) as dropped:
            client.messages.create(**loop_request(None))
    assert "Invalid `signature` in `thinking` block" in str(edited.value)
    assert "Expected `thinking` or `redacted_thinking`, but found `tool_use`" in str(dropped.value)


def test_more_than_four_cache_breakpoints_refused() -> None:
    cc = {"type": "ephemeral"}
    system = [{"type": "text", "text": f"segment {i}", "cache_control": cc} for i in range(5)]
    with ProviderServer([OK]) as server:
        resp = raw_post(
            server,
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "system": system, "messages": MSG},
            ANTHROPIC_H,
        )
    assert resp.status_code == 400
    assert (
        resp.json()["error"]["message"]
        == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


# Auth ---------------------------------------------------------------------------------------------


def test_missing_key_is_401_in_each_providers_shape() -> None:
    with ProviderServer([OK]) as server:
        a = raw_post(
            server,
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": MSG},
            {"anthropic-version": "2023-06-01"},
        )
        o = raw_post(server, "/v1/chat/completions", {"model": "m", "messages": MSG}, {})
        r = raw_post(server, "/v1/responses", {"model": "m", "input": "hi"}, {"authorization": "Bearer"})
        assert server.remaining == 1
    assert a.status_code == o.status_code == r.status_code == 401
    assert a.json()["error"] == {"type": "authentication_error", "message": "x-api-key header is required"}
    assert o.json()["error"]["message"].startswith("You didn't provide an API key.")
    assert o.json()["error"]["code"] is None and o.json()["error"]["type"] == "invalid_request_error"
    assert r.json() == o.json()


def test_wrong_key_raises_authentication_error_in_the_sdks() -> None:
    with ProviderServer([OK], api_key="sk-right-key-0000") as server:
        with pytest.raises(anthropic.AuthenticationError) as a:
            anthropic.Anthropic(
                api_key="sk-wrong", base_url=server.anthropic_url, max_retries=0
            ).messages.create(model="m", max_tokens=5, messages=MSG)
        with pytest.raises(openai.AuthenticationError) as o:
            openai.OpenAI(
                api_key="sk-wrong-key-1234", base_url=server.openai_url, max_retries=0
            ).chat.completions.create(model="m", messages=MSG)
        ok = anthropic.Anthropic(api_key="sk-right-key-0000", base_url=server.anthropic_url).messages.create(
            model="m", max_tokens=5, messages=MSG
        )
    assert a.value.status_code == 401 and "invalid x-api-key" in str(a.value)
    assert o.value.code == "invalid_api_key" and "Incorrect API key provided: sk-**********1234." in str(
        o.value
    )
    assert ok.content[0].text == "ok"


def test_x_api_key_header_is_accepted() -> None:
    with ProviderServer([OK]) as server:
        resp = raw_post(server, "/v1/messages", {"model": "m", "max_tokens": 5, "messages": MSG}, ANTHROPIC_H)
    assert resp.status_code == 200 and resp.json()["content"] == [{"type": "text", "text": "ok"}]


# The rules, as an invariant -------------------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Alternating Anthropic conversations whose every wave is answered in the next message."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "start"}]}]
    n = 0
    for _ in range(draw(st.integers(1, 5))):
        k = draw(st.integers(0, 3))
        ids = [f"toolu_{n + i}" for i in range(k)]
        n += k
        text = [{"type": "text", "text": "thinking aloud"}] if draw(st.booleans()) or not ids else []
        calls = [{"type": "tool_use", "id": i, "name": "read_file", "input": {}} for i in ids]
        messages.append({"role": "assistant", "content": text + calls})
        results = [
            {"type": "tool_result", "tool_use_id": i, "content": "r"} for i in draw(st.permutations(ids))
        ]
        steer = [{"type": "text", "text": "user: more"}] if draw(st.booleans()) or not ids else []
        messages.append({"role": "user", "content": results + steer})
    return messages


@settings(max_examples=200, deadline=None)
@given(messages=conversations(), data=st.data())
def test_well_formed_conversations_pass_and_dropping_any_result_is_refused(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": messages}
    assert check_anthropic(body) is None
    spots = [
        (i, j)
        for i, m in enumerate(messages)
        for j, b in enumerate(m["content"])
        if b["type"] == "tool_result"
    ]
    if not spots:
        return
    i, j = data.draw(st.sampled_from(spots))
    broken = json.loads(json.dumps(messages))
    del broken[i]["content"][j]
    if not broken[i]["content"]:
        broken[i]["content"] = [{"type": "text", "text": "gone"}]
    rej = check_anthropic({**body, "messages": broken})
    assert rej is not None
    assert "`tool_use` ids were found without `tool_result` blocks immediately after" in rej.message
