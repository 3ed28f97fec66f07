"""Property tests of the renderers over generated conversations of the shape the runtime builds
(waves answered in the next user message, steers after results, thinking of several provenances):
rendering is deterministic and pure, every call and result renders exactly once, Anthropic
breakpoints never exceed four, every body passes the provider-grammar validator, and a longer
conversation's body extends a shorter one's."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.messages import message, text_block, thinking_block, tool_result_block, tool_use_block
from runfold.core.render import (
    DIALECTS,
    MAX_BREAKPOINTS,
    RequestSpec,
    SystemSegment,
    ToolSpec,
    render,
    render_request,
    request_bytes,
)
from runfold.core.validate import validate

MODELS = {"anthropic": "claude-sonnet-4-5", "openai-chat": "gpt-4.1", "openai-responses": "gpt-5"}
SETTINGS = settings(max_examples=150, deadline=None)

texts = st.one_of(
    st.sampled_from(["", " ", "\n\t", "ok", "user: approve", "</letter>", "é—ü"]),
    st.text(max_size=12),
)
solid_texts = texts.filter(lambda t: bool(t.strip()))
models = st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-1", "gpt-5", "o3", None])
arguments = st.sampled_from(
    ['{"path":"a"}', '{"n": 1.50, "big": 123456789012345678901234}', "{}", '{"x":', "[1]"]
)


def provenance(dialect: str | None, model: str | None, **more: str) -> dict[str, str]:
    out = dict(more)
    if dialect is not None:
        out["dialect"] = dialect
    if model is not None:
        out["model"] = model
    return out


@st.composite
def anthropic_thinking(draw: st.DrawFn) -> dict[str, Any]:
    prov = provenance(draw(st.sampled_from(["anthropic", None])), draw(models))
    if draw(st.booleans()):
        return thinking_block(draw(texts), draw(st.sampled_from(["SIG1", "SIG2"])), **prov)
    return {"kind": "redacted_thinking", "data": "REDACTED", **prov}


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Alternating messages opening and closing with the user; every wave answered in the next
    user message (results in any order, first), then optional steer text."""
    msgs = [message("user", [text_block(draw(solid_texts))])]
    next_id = 0
    for _ in range(draw(st.integers(0, 5))):
        blocks = draw(st.lists(anthropic_thinking(), max_size=2))
        calls: list[str] = []
        for _ in range(draw(st.integers(0, 5))):
            choice = draw(st.sampled_from(["text", "call", "reasoning"]))
            if choice == "text":
                blocks.append(text_block(draw(texts)))
            elif choice == "call":
                call_id = f"call_{next_id}"
                next_id += 1
                calls.append(call_id)
                blocks.append(
                    tool_use_block(call_id, draw(st.sampled_from(["read", "list"])), draw(arguments))
                )
            else:
                prov = provenance("openai-responses", draw(models), id=f"rs_{next_id}")
                next_id += 1
                blocks.append(thinking_block(draw(texts), draw(st.sampled_from(["ENC", ""])), **prov))
        msgs.append(message("assistant", blocks))
        order = draw(st.permutations(calls))
        user = [tool_result_block(c, draw(texts), draw(st.booleans())) for c in order]
        if not calls or draw(st.booleans()):
            user.append(text_block(draw(solid_texts if not calls else texts)))
        msgs.append(message("user", user))
    return msgs


segments = st.lists(
    st.builds(SystemSegment, st.sampled_from(["workspace", "room", "agent", "run"]), texts, st.booleans()),
    max_size=6,
)
tool_tables = st.lists(
    st.builds(ToolSpec, st.sampled_from(["read", "list"]), st.just("d"), st.just({"type": "object"})),
    max_size=3,
)


def spec_for(dialect: str, msgs: list[dict[str, Any]], **kw: Any) -> RequestSpec:
    return RequestSpec(model=MODELS[dialect], messages=msgs, **kw)


def ids_in(msgs: list[dict[str, Any]], kind: str, key: str) -> list[str]:
    return [b[key] for m in msgs for b in m["content"] if b["kind"] == kind]


def rendered_ids(dialect: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(call ids, result ids) in body order."""
    if dialect == "anthropic":
        blocks = [b for m in body["messages"] for b in m["content"]]
        return (
            [b["id"] for b in blocks if b["type"] == "tool_use"],
            [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"],
        )
    if dialect == "openai-chat":
        msgs = body["messages"]
        return (
            [c["id"] for m in msgs for c in m.get("tool_calls", [])],
            [m["tool_call_id"] for m in msgs if m["role"] == "tool"],
        )
    items = body["input"]
    return (
        [i["call_id"] for i in items if i["type"] == "function_call"],
        [i["call_id"] for i in items if i["type"] == "function_call_output"],
    )


@SETTINGS
@given(conversations(), segments, tool_tables, st.sampled_from(DIALECTS))
def test_rendering_is_deterministic_and_pure(
    msgs: list[dict[str, Any]], system: list[SystemSegment], tools: list[ToolSpec], dialect: str
) -> None:
    before = copy.deepcopy(msgs)
    first = request_bytes(render(dialect, spec_for(dialect, msgs, system=system, tools=tools)))
    again = request_bytes(render(dialect, spec_for(dialect, copy.deepcopy(msgs), system=system, tools=tools)))
    assert first == again
    assert msgs == before


@SETTINGS
@given(conversations(), st.sampled_from(DIALECTS))
def test_every_call_and_result_renders_exactly_once(msgs: list[dict[str, Any]], dialect: str) -> None:
    calls, results = rendered_ids(dialect, render(dialect, spec_for(dialect, msgs)))
    assert calls == ids_in(msgs, "tool_use", "id")
    expected_results = ids_in(msgs, "tool_result", "tool_use_id")
    if dialect == "openai-chat":  # Chat sends a wave's results in call order
        assert results == calls
    else:
        assert results == expected_results


@SETTINGS
@given(conversations(), segments, tool_tables)
def test_breakpoints_never_exceed_four(
    msgs: list[dict[str, Any]], system: list[SystemSegment], tools: list[ToolSpec]
) -> None:
    rendered = render_request("anthropic", spec_for("anthropic", msgs, system=system, tools=tools))
    assert len(rendered.breakpoints) <= MAX_BREAKPOINTS
    assert request_bytes(rendered.body).count(b'"cache_control"') == len(rendered.breakpoints)
    assert rendered.breakpoints[-1:] == ("tail",)  # the conversation always ends with a sendable block
    if any(s.text.strip() for s in system):
        last_sent = [s.slot for s in system if s.text.strip()][-1]
        assert rendered.breakpoints[-2] == last_sent


@SETTINGS
@given(conversations(), segments, tool_tables, st.sampled_from(DIALECTS))
def test_every_rendered_body_validates_clean(
    msgs: list[dict[str, Any]], system: list[SystemSegment], tools: list[ToolSpec], dialect: str
) -> None:
    body = render(dialect, spec_for(dialect, msgs, system=system, tools=tools))
    assert [v.display() for v in validate(dialect, body)] == []


@SETTINGS
@given(conversations())
def test_anthropic_with_thinking_enabled_validates_clean(msgs: list[dict[str, Any]]) -> None:
    """Foreign thinking omitted can leave a tool loop without its opening thinking block; the
    renderer then sends that request without the thinking config instead of one the API refuses."""
    spec = spec_for("anthropic", msgs, thinking={"type": "enabled", "budget_tokens": 1024})
    body = render("anthropic", spec)
    assert [v.display() for v in validate("anthropic", body)] == []
    last = body["messages"][-1]["content"]
    if not any(b["type"] == "tool_result" for b in last):
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


def strip_cache(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache(v) for v in value]
    return value


@SETTINGS
@given(conversations(), st.sampled_from(DIALECTS), st.data())
def test_longer_conversation_extends_the_shorter_body(
    msgs: list[dict[str, Any]], dialect: str, data: st.DataObject
) -> None:
    cut = data.draw(st.sampled_from(range(1, len(msgs) + 1, 2)))  # requests end with a user message
    key = {"anthropic": "messages", "openai-chat": "messages", "openai-responses": "input"}[dialect]
    short = strip_cache(render(dialect, spec_for(dialect, msgs[:cut]))[key])
    full = strip_cache(render(dialect, spec_for(dialect, msgs))[key])
    if dialect == "anthropic" and short:
        # the open user message may be extended when an empty reply joined it with the next one
        assert full[: len(short) - 1] == short[:-1]
        assert full[len(short) - 1]["content"][: len(short[-1]["content"])] == short[-1]["content"]
    else:
        assert full[: len(short)] == short
