"""Renderers: golden request bytes per dialect for one fixed conversation, and the rules each
dialect's projection follows (foreign thinking omitted, reasoning grouped, results in call
order, cache breakpoints, replies parsed back into blocks)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from runfold.core.canonical import encode_json
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.messages import message, text_block, thinking_block, tool_result_block, tool_use_block
from runfold.core.render import (
    DIALECTS,
    RequestSpec,
    SystemSegment,
    ToolSpec,
    parse_reply,
    render,
    render_request,
    request_bytes,
    tools_bytes,
)
from runfold.core.validate import validate

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "render"
CONVERSATION = json.loads((GOLDEN / "conversation.json").read_text(encoding="utf-8"))


def golden_spec(dialect: str) -> RequestSpec:
    settings = CONVERSATION["specs"][dialect]
    return RequestSpec(
        system=tuple(SystemSegment(**s) for s in CONVERSATION["system"]),
        tools=tuple(ToolSpec(**t) for t in CONVERSATION["tools"]),
        messages=CONVERSATION["messages"],
        **settings,
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_golden_request_bytes(dialect: str) -> None:
    got = request_bytes(render(dialect, golden_spec(dialect)))
    path = GOLDEN / f"{dialect}.json"
    if os.environ.get("RUNFOLD_REGEN_GOLDEN") == "1":
        path.write_bytes(got)
    assert got == path.read_bytes()


def test_golden_anthropic_breakpoints() -> None:
    rendered = render_request("anthropic", golden_spec("anthropic"))
    assert rendered.breakpoints == ("workspace", "room", "run", "tail")
    assert request_bytes(rendered.body).count(b'"cache_control"') == 4


def test_golden_anthropic_projection() -> None:
    body = render("anthropic", golden_spec("anthropic"))
    raw = request_bytes(body)
    # foreign thinking (another Anthropic model, and OpenAI reasoning) is omitted whole
    assert b"Eo0BCkYIBxgCKkBvbGRtb2RlbA==" not in raw
    assert b"gAAAAB-encrypted" not in raw
    first_reply, second_reply = body["messages"][1]["content"], body["messages"][3]["content"]
    assert first_reply[0] == {
        "type": "thinking",
        "thinking": "I should read both files at once.",
        "signature": "EqQBCkYIBxgCKkA0c2lnbmF0dXJl",
    }
    assert [b["type"] for b in second_reply] == ["redacted_thinking", "tool_use"]
    # arguments text parsed into the object; the float re-encoded by orjson
    assert first_reply[3]["input"] == {"path": "b.txt", "max_kib": 1.5}
    assert b'"input":{"path":"b.txt","max_kib":1.5}' in raw
    results = body["messages"][2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert "is_error" not in results[0] and results[1]["is_error"] is True
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["stream"] is True


def test_golden_chat_projection() -> None:
    body = render("openai-chat", golden_spec("openai-chat"))
    roles = [m["role"] for m in body["messages"]]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert body["messages"][2]["tool_calls"][1]["function"]["arguments"] == '{"path":"b.txt","max_kib":1.50}'
    assert body["messages"][6]["content"] is None  # tool-only reply: thinking is never sent to Chat
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.2
    assert b"thinking" not in request_bytes(body)


def test_golden_responses_projection() -> None:
    body = render("openai-responses", golden_spec("openai-responses"))
    types = [item["type"] for item in body["input"]]
    assert types == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    raw = request_bytes(body)
    assert b"rs-3" not in raw  # reasoning with no following item is dropped with its group
    assert b"rs-9" not in raw  # another model's reasoning
    assert b'"id":"rs_' not in raw  # ids of unstored items are not sent (store: false)
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "medium"}
    assert all(t["strict"] is False for t in body["tools"])


# ---- single rules ------------------------------------------------------------------------


def spec_of(messages: list[dict[str, Any]], **kw: Any) -> RequestSpec:
    kw.setdefault("model", "m1")
    return RequestSpec(messages=messages, **kw)


def test_unknown_dialect_names_the_choices() -> None:
    with pytest.raises(RunfoldError) as err:
        render("gemini", spec_of([message("user", [text_block("hi")])]))
    assert err.value.code is ErrorCode.INVALID_ARGS
    assert "openai-responses" in err.value.recovery


def test_block_in_wrong_role_names_its_path() -> None:
    msgs = [message("user", [text_block("hi"), tool_use_block("c1", "f", "{}")])]
    for dialect in DIALECTS:
        with pytest.raises(RunfoldError) as err:
            render(dialect, spec_of(msgs))
        assert err.value.subject == "messages[0].content[1]"


def test_assistant_left_empty_is_dropped_and_users_join() -> None:
    foreign = thinking_block("t", "sig", dialect="anthropic", model="other")
    msgs = [
        message("user", [text_block("one")]),
        message("assistant", [foreign, text_block("  \n")]),
        message("user", [text_block("two")]),
    ]
    body = render("anthropic", spec_of(msgs))
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]
    assert [m["role"] for m in render("openai-chat", spec_of(msgs))["messages"]] == ["user", "user"]


def test_chat_puts_results_in_call_order_then_text() -> None:
    msgs = [
        message("user", [text_block("go")]),
        message("assistant", [tool_use_block("c1", "f", "{}"), tool_use_block("c2", "f", "{}")]),
        message(
            "user",
            [
                text_block("user: hurry"),
                tool_result_block("c2", "B", False),
                tool_result_block("c1", "A", True),
            ],
        ),
    ]
    tail = render("openai-chat", spec_of(msgs))["messages"][2:]
    assert tail == [
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "user", "content": "user: hurry"},
    ]


def test_responses_reasoning_stays_before_its_item() -> None:
    r1 = thinking_block("a", "enc1", dialect="openai-responses", id="rs_1", model="m1")
    r2 = thinking_block("b", "enc2", dialect="openai-responses", id="rs_2", model="m1")
    unsigned = thinking_block("c", "", dialect="openai-responses", id="rs_3", model="m1")
    msgs = [
        message("user", [text_block("go")]),
        message(
            "assistant", [text_block("x"), r1, r2, text_block("y"), unsigned, tool_use_block("c1", "f", "{}")]
        ),
        message("user", [tool_result_block("c1", "ok", False)]),
    ]
    items = render("openai-responses", spec_of(msgs))["input"]
    assert items[1:4] == [  # of two reasoning items in a row only the last has its following item
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        {"type": "reasoning", "encrypted_content": "enc2", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "y"}]},
    ]
    assert items[4] == {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}


def test_thinking_without_provenance_counts_as_anthropic_of_this_model() -> None:
    msgs = [
        message("user", [text_block("q")]),
        message("assistant", [thinking_block("t", "s"), text_block("a")]),
    ]
    assert render("anthropic", spec_of(msgs))["messages"][1]["content"][0]["type"] == "thinking"
    assert [i["type"] for i in render("openai-responses", spec_of(msgs))["input"]] == ["message", "message"]


def test_unparseable_arguments_still_render() -> None:
    msgs = [
        message("user", [text_block("q")]),
        message("assistant", [tool_use_block("c1", "f", '{"path": "a'), tool_use_block("c2", "f", "[1]")]),
        message("user", [tool_result_block("c1", "bad", True), tool_result_block("c2", "bad", True)]),
    ]
    calls = render("anthropic", spec_of(msgs))["messages"][1]["content"]
    assert calls[0]["input"] == {"_unparsed_arguments": '{"path": "a'}
    assert calls[1]["input"] == {"_unparsed_arguments": "[1]"}


def test_breakpoints_never_exceed_four_and_prefer_early_edges() -> None:
    system = [SystemSegment(f"s{i}", f"text {i}", edge=True) for i in range(6)]
    msgs = [message("user", [text_block("q")])]
    rendered = render_request("anthropic", spec_of(msgs, system=system))
    assert rendered.breakpoints == ("s0", "s1", "s5", "tail")
    marked = [b for b in rendered.body["system"] if "cache_control" in b]
    assert [b["text"] for b in marked] == ["text 0", "text 1", "text 5"]


def test_edge_on_empty_segment_moves_back_and_tools_edge_without_system() -> None:
    system = [SystemSegment("a", "A"), SystemSegment("b", "", edge=True), SystemSegment("c", "C")]
    rendered = render_request("anthropic", spec_of([message("user", [text_block("q")])], system=system))
    assert rendered.breakpoints == ("a", "c", "tail")
    tools = [ToolSpec("f", "d", {"type": "object"}), ToolSpec("g", "d", {"type": "object"})]
    rendered = render_request("anthropic", spec_of([message("user", [text_block("q")])], tools=tools))
    assert rendered.breakpoints == ("tools", "tail")
    assert "cache_control" in rendered.body["tools"][1] and "cache_control" not in rendered.body["tools"][0]
    off = render_request(
        "anthropic", spec_of([message("user", [text_block("q")])], tools=tools, cache_breakpoints=False)
    )
    assert off.breakpoints == () and b"cache_control" not in request_bytes(off.body)


def test_tail_breakpoint_skips_thinking() -> None:
    msgs = [
        message("user", [text_block("q")]),
        message("assistant", [text_block("a"), thinking_block("t", "s")]),
    ]
    body = render("anthropic", spec_of(msgs))
    assert body["messages"][1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["messages"][1]["content"][1]


def test_images_need_resolved_data() -> None:
    msgs = [
        message(
            "user",
            [
                text_block("see"),
                {"kind": "image", "locator": "cas:b3-" + "a" * 64, "media_type": "image/png"},
            ],
        )
    ]
    for dialect in DIALECTS:
        with pytest.raises(RunfoldError) as err:
            render(dialect, spec_of(msgs))
        assert err.value.subject == "messages[0].content[1]"
    spec = spec_of(msgs, images={"cas:b3-" + "a" * 64: "iVBORw0K"})
    assert render("anthropic", spec)["messages"][0]["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0K",
    }
    assert render("openai-chat", spec)["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0K"},
    }
    assert render("openai-responses", spec)["input"][0]["content"][1] == {
        "type": "input_image",
        "image_url": "data:image/png;base64,iVBORw0K",
    }


def test_render_does_not_touch_its_input() -> None:
    spec = golden_spec("anthropic")
    before = copy.deepcopy(CONVERSATION)
    for dialect in DIALECTS:
        render(dialect, spec)
    assert before == CONVERSATION


def test_tools_bytes_is_canonical_and_dialect_free() -> None:
    tools = [ToolSpec("read", "Read", {"type": "object", "properties": {"b": {}, "a": {}}}, strict=True)]
    assert tools_bytes(tools) == encode_json(
        [{"description": "Read", "input_schema": tools[0].input_schema, "name": "read", "strict": True}]
    )
    assert tools_bytes(tools).index(b'"a"') < tools_bytes(tools).index(b'"b"')
    for bad in ({"maximum": float("inf")}, {"maximum": 1 << 70}, {"enum": {1, 2}}, {1: "x"}):
        with pytest.raises(RunfoldError) as err:
            ToolSpec("bad", "d", bad)
        assert err.value.subject.startswith("tools[bad].input_schema")


def test_request_bytes_are_compact_utf8_in_build_order() -> None:
    raw = request_bytes({"z": "é—\n", "a": [1, 2.5]})
    assert raw == '{"z":"é—\\n","a":[1,2.5]}'.encode()


# ---- replies back into blocks --------------------------------------------------------------


def test_parse_anthropic_reply() -> None:
    response = {
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "SIG"},
            {"type": "redacted_thinking", "data": "RED"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a", "n": 1.5}},
        ],
    }
    blocks = parse_reply("anthropic", orjson.loads(orjson.dumps(response)))
    assert blocks == [
        {
            "kind": "thinking",
            "thinking": "hm",
            "signature": "SIG",
            "dialect": "anthropic",
            "model": "claude-sonnet-4-5",
        },
        {"kind": "redacted_thinking", "data": "RED", "dialect": "anthropic", "model": "claude-sonnet-4-5"},
        {"kind": "text", "text": "Reading."},
        {"kind": "tool_use", "id": "toolu_1", "name": "read_file", "input": '{"path":"a","n":1.5}'},
    ]
    # the reply renders back to the same content for the same model
    msgs = [message("user", [text_block("q")]), message("assistant", blocks)]
    sent = render("anthropic", spec_of(msgs, model="claude-sonnet-4-5", cache_breakpoints=False))
    assert sent["messages"][1]["content"] == response["content"]


def test_parse_chat_reply_keeps_arguments_verbatim() -> None:
    response = {
        "model": "gpt-4.1",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"x": 1.10}'},
                        }
                    ],
                }
            }
        ],
    }
    assert parse_reply("openai-chat", response) == [tool_use_block("call_1", "f", '{"x": 1.10}')]


def test_parse_responses_reply() -> None:
    response = {
        "model": "gpt-5",
        "output": [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "s1"}, {"type": "summary_text", "text": "s2"}],
                "encrypted_content": "ENC",
            },
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"},
        ],
    }
    blocks = parse_reply("openai-responses", response)
    assert blocks[0] == {
        "kind": "thinking",
        "thinking": "s1\n\ns2",
        "signature": "ENC",
        "dialect": "openai-responses",
        "id": "rs_1",
        "model": "gpt-5",
    }
    assert blocks[1:] == [text_block("hi"), tool_use_block("call_1", "f", "{}")]


@pytest.mark.parametrize(
    ("dialect", "response", "subject"),
    [
        ("anthropic", {"content": [{"type": "server_tool_use"}]}, "response.content[0]"),
        ("anthropic", {"content": "x"}, "response.content"),
        ("openai-chat", {"choices": []}, "response.choices"),
        (
            "openai-responses",
            {"output": [{"type": "function_call", "name": "f"}]},
            "response.output[0].call_id",
        ),
    ],
)
def test_parse_reply_names_the_bad_field(dialect: str, response: dict[str, Any], subject: str) -> None:
    with pytest.raises(RunfoldError) as err:
        parse_reply(dialect, response)
    assert err.value.subject == subject


def test_thinking_config_left_out_while_a_loop_without_thinking_continues() -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    foreign = thinking_block("t", "sig", dialect="anthropic", model="other-model")
    own = thinking_block("t", "sig", dialect="anthropic", model="m1")
    loop = [
        message("user", [text_block("q")]),
        message("assistant", [foreign, tool_use_block("c1", "f", "{}")]),
        message("user", [tool_result_block("c1", "r", False)]),
    ]
    assert "thinking" not in render("anthropic", spec_of(loop, thinking=thinking))
    loop[1] = message("assistant", [own, tool_use_block("c1", "f", "{}")])
    assert render("anthropic", spec_of(loop, thinking=thinking))["thinking"] == thinking
    # a new user turn (no results in the last message) always carries the config
    turn = [
        *loop[:2],
        message("user", [tool_result_block("c1", "r", False)]),
        message("assistant", [text_block("a")]),
        message("user", [text_block("next")]),
    ]
    turn[1] = message("assistant", [foreign, tool_use_block("c1", "f", "{}")])
    assert render("anthropic", spec_of(turn, thinking=thinking))["thinking"] == thinking


# ---- the accepted request shapes of tests/fixtures/histories/valid -------------------------

VALID = Path(__file__).resolve().parent.parent / "fixtures" / "histories" / "valid"


def _join(msgs: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if msgs and msgs[-1]["role"] == role:
        msgs[-1]["content"].extend(blocks)
    else:
        msgs.append({"role": role, "content": blocks})


def internal_from_anthropic(request: dict[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for m in request["messages"]:
        blocks = []
        for b in m["content"]:
            if b["type"] == "text":
                blocks.append(text_block(b["text"]))
            elif b["type"] == "thinking":
                blocks.append(
                    thinking_block(b["thinking"], b["signature"], dialect="anthropic", model=request["model"])
                )
            elif b["type"] == "tool_use":
                blocks.append(tool_use_block(b["id"], b["name"], orjson.dumps(b["input"]).decode()))
            else:
                blocks.append(tool_result_block(b["tool_use_id"], b["content"], bool(b.get("is_error"))))
        _join(msgs, m["role"], blocks)
    return msgs


def internal_from_chat(request: dict[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for m in request["messages"]:
        if m["role"] == "user":
            _join(msgs, "user", [text_block(m["content"])])
        elif m["role"] == "tool":
            _join(msgs, "user", [tool_result_block(m["tool_call_id"], m["content"], False)])
        elif m["role"] == "assistant":
            blocks = [text_block(m["content"])] if m.get("content") else []
            blocks += [
                tool_use_block(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in m["tool_calls"]
            ]
            _join(msgs, "assistant", blocks)
    return msgs


def internal_from_responses(request: dict[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for item in request["input"]:
        if item["type"] == "message":
            _join(msgs, item["role"], [text_block(p["text"]) for p in item["content"]])
        elif item["type"] == "function_call":
            _join(msgs, "assistant", [tool_use_block(item["call_id"], item["name"], item["arguments"])])
        else:
            _join(msgs, "user", [tool_result_block(item["call_id"], item["output"], False)])
    return msgs


@pytest.mark.parametrize("path", sorted(VALID.glob("*.json")), ids=lambda p: p.stem)
def test_accepted_histories_render_back_to_their_own_shape(path: Path) -> None:
    """Each request a real API accepts, read into internal messages and rendered again, gives
    the same messages/items: the renderer writes the shapes the providers take."""
    fixture = json.loads(path.read_text(encoding="utf-8"))
    dialect, request = fixture["dialect"], fixture["request"]
    reader = {"anthropic": internal_from_anthropic, "openai-chat": internal_from_chat}.get(
        dialect, internal_from_responses
    )
    spec = RequestSpec(model=request["model"], messages=reader(request), cache_breakpoints=False)
    key = "input" if dialect == "openai-responses" else "messages"
    got = render(dialect, spec)[key]
    expected = [m for m in request[key] if m.get("role") != "system"]
    assert got == expected
    assert validate(dialect, render(dialect, spec)) == []
