"""Chat Completions accepts a tool-call id reused by a later assistant message (recorded gpt-4o
trajectories do it); it still refuses an id repeated within one message or answered twice
within one run of tool messages. Anthropic and Responses keep ids unique per request."""

from __future__ import annotations

from typing import Any

from runfold.core.validate import validate


def _call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "go"}, *messages]}


def _rules(body: dict[str, Any]) -> list[str]:
    return [v.rule for v in validate("openai-chat", body)]


def test_an_id_reused_in_a_later_turn_is_accepted() -> None:
    body = _body(
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "b"},
        {"role": "assistant", "content": "done"},
    )
    assert _rules(body) == []


def test_an_id_repeated_within_one_turn_is_refused() -> None:
    body = _body(
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1"), _call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"},
    )
    assert "tool-call-id-unique" in _rules(body)


def test_an_id_answered_twice_in_one_turn_is_refused() -> None:
    body = _body(
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"},
        {"role": "tool", "tool_call_id": "call_1", "content": "b"},
    )
    assert _rules(body) == ["tool-call-id-unique"]


def test_a_reused_call_left_unanswered_is_still_refused() -> None:
    body = _body(
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "user", "content": "wait"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "b"},
    )
    assert _rules(body) == ["tool-call-answered"]


def test_anthropic_still_refuses_a_reused_id() -> None:
    body = {
        "model": "claude",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "b"}]},
        ],
    }
    assert "tool-call-id-unique" in [v.rule for v in validate("anthropic", body)]
