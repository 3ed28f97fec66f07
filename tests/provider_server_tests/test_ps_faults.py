"""Injected faults as the SDKs meet them: 429 with retry headers then success through the SDK's
own retry, 500/529 then success, cut streams and in-stream errors raised, refusals not retried,
delays, an exhausted script, and malformed scripts refused with the entry named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from provider_server import Fault, ProviderServer, Reply, load_jsonl, parse_entry
from runfold.core.errors import RunfoldError

OK = {"content": [{"kind": "text", "text": "recovered"}]}
MSG = [{"role": "user", "content": "hi"}]
DIALECTS = ("anthropic", "openai-chat", "openai-responses")


def call(server: ProviderServer, dialect: str, *, retries: int = 0, stream: bool = False) -> str:
    """One request through the official SDK; returns the reply text."""
    if dialect == "anthropic":
        ac = anthropic.Anthropic(api_key="k", base_url=server.anthropic_url, max_retries=retries)
        if stream:
            with ac.messages.stream(model="m", max_tokens=32, messages=MSG) as s:
                return str(s.get_final_text())
        block = ac.messages.create(model="m", max_tokens=32, messages=MSG).content[0]
        return str(getattr(block, "text", ""))
    oc = openai.OpenAI(api_key="k", base_url=server.openai_url, max_retries=retries)
    if dialect == "openai-chat":
        if stream:
            with oc.chat.completions.stream(model="m", messages=MSG) as cs:
                return str(cs.get_final_completion().choices[0].message.content)
        return str(oc.chat.completions.create(model="m", messages=MSG).choices[0].message.content)
    if stream:
        with oc.responses.stream(model="m", input="hi") as rs:
            return rs.get_final_response().output_text
    return oc.responses.create(model="m", input="hi").output_text


@pytest.mark.parametrize("dialect", DIALECTS)
def test_429_then_success_through_the_sdks_own_retry(dialect: str) -> None:
    with ProviderServer([{"fault": "http_429", "retry_after_ms": 10}, OK]) as server:
        assert call(server, dialect, retries=2) == "recovered"
        first, second = server.requests
    assert (first.status, second.status) == (429, 200)
    assert (first.entry, second.entry) == (0, 1)
    assert first.raw == second.raw  # the SDK retried the same bytes


@pytest.mark.parametrize("dialect", DIALECTS)
def test_429_headers_and_body_shape(dialect: str) -> None:
    path = {
        "anthropic": "/v1/messages",
        "openai-chat": "/v1/chat/completions",
        "openai-responses": "/v1/responses",
    }[dialect]
    body: dict[str, Any] = {"model": "m", "messages": MSG}
    if dialect == "anthropic":
        body["max_tokens"] = 5
    if dialect == "openai-responses":
        body = {"model": "m", "input": "hi"}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "authorization": "Bearer k"}
    with ProviderServer([{"fault": "http_429", "retry_after_ms": 1500}]) as server:
        resp = httpx.post(server.base_url + path, json=body, headers=headers)
    assert resp.status_code == 429
    assert resp.headers["retry-after-ms"] == "1500" and resp.headers["retry-after"] == "2"
    if dialect == "anthropic":
        assert resp.json()["error"]["type"] == "rate_limit_error"
    else:
        assert resp.json()["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize(
    ("dialect", "fault"),
    [(d, "http_500") for d in DIALECTS] + [("anthropic", "http_529"), ("openai-chat", "http_529")],
)
def test_server_errors_then_success(dialect: str, fault: str) -> None:
    with ProviderServer([{"fault": fault}, OK]) as server:
        assert call(server, dialect, retries=2) == "recovered"
        statuses = [r.status for r in server.requests]
    expected = {"http_500": 500, "http_529": 529 if dialect == "anthropic" else 503}[fault]
    assert statuses == [expected, 200]


def test_server_error_without_retries_raises_the_sdks_status_errors() -> None:
    with ProviderServer([{"fault": "http_529"}, {"fault": "http_500"}]) as server:
        with pytest.raises(anthropic.APIStatusError) as overloaded:
            call(server, "anthropic")
        with pytest.raises(openai.InternalServerError) as internal:
            call(server, "openai-chat")
    assert overloaded.value.status_code == 529
    assert overloaded.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_test000000",
    }
    assert internal.value.status_code == 500 and internal.value.type == "server_error"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_refusal_is_a_bad_request_and_is_not_retried(dialect: str) -> None:
    with ProviderServer([{"fault": "http_400_refusal"}, OK]) as server:
        with pytest.raises((anthropic.BadRequestError, openai.BadRequestError)):
            call(server, dialect, retries=2)
        assert len(server.requests) == 1 and server.remaining == 1


CUT_ERRORS = (anthropic.APIConnectionError, openai.APIConnectionError, httpx.RemoteProtocolError)
try:  # the anthropic SDK may ship its own httpx fork and raise its transport errors raw
    import httpx2  # type: ignore[import-not-found]

    CUT_ERRORS = (*CUT_ERRORS, httpx2.RemoteProtocolError)
except ImportError:
    pass


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_cut_stream_raises_in_the_sdk(dialect: str, stream: bool) -> None:
    long_text = {"content": [{"kind": "text", "text": "x" * 200}]}
    with ProviderServer([{"fault": "cut_stream", "after_events": 3, **long_text}]) as server:
        with pytest.raises(CUT_ERRORS):
            call(server, dialect, stream=stream)
        [rec] = server.requests
    assert rec.entry == 0 and rec.error == "cut_stream"


def test_cut_stream_delivers_exactly_the_first_events() -> None:
    with ProviderServer([{"fault": "cut_stream", "after_events": 4}]) as server:
        with httpx.stream(
            "POST",
            server.base_url + "/v1/messages",
            json={"model": "m", "max_tokens": 5, "messages": MSG, "stream": True},
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        ) as resp:
            received = b""
            with pytest.raises(httpx.RemoteProtocolError):
                for piece in resp.iter_raw():
                    received += piece
    events = [line for line in received.decode().splitlines() if line.startswith("event: ")]
    assert events == [
        "event: message_start",
        "event: ping",
        "event: content_block_start",
        "event: content_block_delta",
    ]


def test_cut_stream_then_success_with_retries_on_a_fresh_call() -> None:
    with ProviderServer([{"fault": "cut_stream", "after_events": 2}, OK]) as server:
        with pytest.raises(CUT_ERRORS):
            call(server, "openai-chat", stream=True)
        assert call(server, "openai-chat", stream=True) == "recovered"


def test_stream_error_event_raises_in_the_sdks() -> None:
    script = [{"fault": "stream_error", "after_events": 3}, {"fault": "stream_error", "after_events": 2}]
    with ProviderServer(script) as server:
        with pytest.raises(anthropic.APIStatusError) as a:
            call(server, "anthropic", stream=True)
        with pytest.raises(openai.APIError) as o:
            call(server, "openai-chat", stream=True)
    assert "Overloaded" in str(a.value)
    assert "The server had an error" in str(o.value)


def test_delay_is_applied_before_the_answer() -> None:
    with ProviderServer([{**OK, "delay_ms": 30}]) as server:
        assert call(server, "anthropic") == "recovered"
        assert server.requests[0].status == 200


def test_exhausted_script_is_a_clear_bad_request() -> None:
    with ProviderServer([OK]) as server:
        call(server, "openai-chat")
        with pytest.raises(openai.BadRequestError) as caught:
            call(server, "openai-chat")
    assert "the script has no entry left for request 1 (1 used)" in str(caught.value)


def test_push_extends_a_running_script() -> None:
    with ProviderServer() as server:
        server.push(OK, {"content": [{"kind": "text", "text": "second"}]})
        assert [call(server, "anthropic"), call(server, "anthropic")] == ["recovered", "second"]
        assert server.remaining == 0 and [r.entry for r in server.accepted] == [0, 1]


# Script parsing ----------------------------------------------------------------------------------


def test_script_entry_forms() -> None:
    plain = parse_entry(
        {"role": "assistant", "content": [{"kind": "text", "text": "a"}], "usage": {"input": 3}}
    )
    wrapped = parse_entry(
        {"message": {"content": [{"kind": "tool_use", "id": "t", "name": "f", "input": "{}"}]}}
    )
    fault = parse_entry({"fault": "http_429", "retry_after_ms": 10})
    assert isinstance(plain, Reply) and plain.usage is not None and plain.usage.input == 3
    assert plain.stop_reason == "end_turn"
    assert isinstance(wrapped, Reply) and wrapped.stop_reason == "tool_use"
    assert isinstance(fault, Fault) and fault.retry_after_ms == 10
    as_object = parse_entry({"content": [{"kind": "tool_use", "id": "t", "name": "f", "input": {"é": 1}}]})
    assert isinstance(as_object, Reply) and as_object.blocks[0]["input"] == '{"é":1}'


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ({"fault": "http_418"}, "script[0].fault"),
        (
            {"content": [{"kind": "tool_use", "id": "t", "name": "f", "input": "[1]"}]},
            "script[0].content[0].input",
        ),
        (
            {"content": [{"kind": "tool_use", "id": "t", "name": "f", "input": "{bad"}]},
            "script[0].content[0].input",
        ),
        (
            {"content": [{"kind": "image", "locator": "cas:x", "media_type": "image/png"}]},
            "script[0].content[0]",
        ),
        ({"content": [{"kind": "thinking", "thinking": "x"}]}, "script[0].content[0].signature"),
        ({"content": [], "stop": "refused"}, "script[0].stop"),
        ({"content": [], "usage": {"prompt": 1}}, "script[0].usage"),
        ({"content": [], "delay_ms": -1}, "script[0].delay_ms"),
    ],
)
def test_malformed_script_entries_are_refused_naming_the_field(entry: dict[str, Any], where: str) -> None:
    with pytest.raises(RunfoldError) as caught:
        parse_entry(entry)
    assert caught.value.subject == where and caught.value.recovery


def test_jsonl_script_file(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text(json.dumps(OK) + "\n\n" + json.dumps({"fault": "http_500"}) + "\n")
    entries = load_jsonl(path)
    assert [type(e).__name__ for e in entries] == ["Reply", "Fault"]
    with ProviderServer(path) as server:
        assert call(server, "openai-responses") == "recovered"
    path.write_text("{not json}\n")
    with pytest.raises(RunfoldError) as caught:
        load_jsonl(path)
    assert caught.value.subject == f"{path}:1"
