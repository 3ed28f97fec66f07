"""The provider-grammar validator against recorded histories and one failing example per rule.

Every file of tests/fixtures/histories/invalid/ (request bodies real providers refused) must be
rejected with the rule its `violates` names; every file of valid/ must pass (DESIGN.md §8).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.validate import (
    DIALECTS,
    RULE_NAMES,
    RULES,
    RULES_BY_NAME,
    Violation,
    ensure_valid,
    infer_dialect,
    validate,
)

HISTORIES = Path(__file__).resolve().parents[1] / "fixtures" / "histories"
INVALID = sorted((HISTORIES / "invalid").glob("*.json"))
VALID = sorted((HISTORIES / "valid").glob("*.json"))

VIOLATES_TO_RULE = {
    "every tool_use must be answered by a tool_result in the next message": "tool-call-answered",
    "tool_use ids are unique within a request": "tool-call-id-unique",
    "text blocks must contain non-whitespace text": "text-not-empty",
    "every tool_result must answer a tool_use of the previous assistant message": "tool-result-has-call",
    "the tool_result blocks come first in the message that answers a wave": "tool-results-first",
    "all results of one wave go in the single user message right after the calls": "wave-answered-together",
    "a tool message's tool_call_id must be one of the preceding assistant's tool_calls": "tool-result-has-call",
    "a tool message must answer a tool call of the preceding assistant message": "tool-result-has-call",
    "an assistant message with tool_calls must be followed by tool messages answering each id": "tool-call-answered",
}
"""The fixtures' plain-words rule → the validator's rule name."""


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_fixture_sets_are_complete() -> None:
    assert len(INVALID) == 9 and len(VALID) == 4
    assert {load(p)["violates"] for p in INVALID} == set(VIOLATES_TO_RULE)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_fixture_rejected_with_its_rule(path: Path) -> None:
    fixture = load(path)
    found = validate(fixture["dialect"], fixture["request"])
    expected = VIOLATES_TO_RULE[fixture["violates"]]
    assert expected in {v.rule for v in found}, found
    assert infer_dialect(fixture["request"]) == fixture["dialect"]
    hit = next(v for v in found if v.rule == expected)
    assert hit.index is not None and 0 <= hit.index < len(fixture["request"]["messages"])
    assert hit.path.startswith(f"messages[{hit.index}]")


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_fixture_accepted(path: Path) -> None:
    fixture = load(path)
    assert validate(fixture["dialect"], fixture["request"]) == []
    assert infer_dialect(fixture["request"]) == fixture["dialect"]
    ensure_valid(fixture["dialect"], fixture["request"])


def test_reported_positions_of_recorded_failures() -> None:
    """Exact findings for three fixtures: the index and path a user must fix."""
    split = load(HISTORIES / "invalid" / "anthropic-wave-results-split.json")["request"]
    assert [(v.index, v.rule, v.path) for v in validate("anthropic", split)] == [
        (3, "roles-alternate", "messages[3].role"),
        (3, "wave-answered-together", "messages[3].content[0]"),
    ]
    cancel = load(HISTORIES / "invalid" / "anthropic-cancel-mid-parallel-wave.json")["request"]
    assert [(v.index, v.path) for v in validate("anthropic", cancel)] == [
        (1, "messages[1].content[1]"),
        (1, "messages[1].content[2]"),
        (1, "messages[1].content[3]"),
    ]
    foreign = load(HISTORIES / "invalid" / "openai-chat-foreign-tool-call-id.json")["request"]
    assert [(v.index, v.rule) for v in validate("openai-chat", foreign)] == [
        (2, "tool-call-answered"),
        (3, "tool-result-has-call"),
    ]


def test_messages_quote_the_provider_wording() -> None:
    fixture = load(HISTORIES / "invalid" / "anthropic-empty-text-block.json")
    (only,) = validate("anthropic", fixture["request"])
    assert fixture["provider_error"] in only.message
    cancel = load(HISTORIES / "invalid" / "anthropic-cancel-mid-parallel-wave.json")
    assert all(cancel["provider_error"] in v.message for v in validate("anthropic", cancel["request"]))
    first = load(HISTORIES / "invalid" / "anthropic-text-before-results.json")
    assert first["provider_error"] in validate("anthropic", first["request"])[0].message


# ---- one failing example per rule ---------------------------------------------------------


def a_user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def a_asst(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def use(cid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": "read_file", "input": {"path": "a"}}


def result(cid: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": cid, "content": "A"}


def anth(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": list(messages), **extra}


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages)}


def resp(*items: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-5", "input": list(items)}


def u_item(t: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]}


def call_item(cid: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": cid, "name": "read_file", "arguments": "{}"}


def out_item(cid: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": cid, "output": "A"}


def tc(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


THINK = {"type": "thinking", "thinking": "plan", "signature": "c2ln"}
ON = {"thinking": {"type": "enabled", "budget_tokens": 1024}}

EXAMPLES: list[tuple[str, str, Any]] = [
    ("body-shape", "anthropic", []),
    ("body-shape", "openai-chat", {"model": "gpt-4o"}),
    ("body-shape", "openai-responses", resp()),
    ("role-valid", "anthropic", anth({"role": "system", "content": "be nice"})),
    ("role-valid", "openai-chat", chat({"role": "function", "name": "f", "content": "x"})),
    ("role-valid", "openai-responses", resp({"type": "message", "role": "tool", "content": "x"})),
    ("content-shape", "anthropic", anth(a_user({"type": "tool_use"}))),
    (
        "content-shape",
        "anthropic",
        anth(a_user(text("hi")), a_asst({"type": "tool_use", "id": "t", "name": "f", "input": "{}"})),
    ),
    ("content-shape", "openai-chat", chat({"role": "user", "content": 5})),
    (
        "content-shape",
        "openai-chat",
        chat(
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}],
            },
        ),
    ),
    ("content-shape", "openai-responses", resp({"type": "bogus"})),
    ("first-message-user", "anthropic", anth(a_asst(text("hello")), a_user(text("hi")))),
    ("roles-alternate", "anthropic", anth(a_user(text("a")), a_user(text("b")))),
    ("content-not-empty", "anthropic", anth(a_user(), a_asst(text("x")), a_user(text("y")))),
    (
        "content-not-empty",
        "openai-chat",
        chat(
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None},
            {"role": "user", "content": "y"},
        ),
    ),
    ("content-not-empty", "openai-responses", resp({"type": "message", "role": "user", "content": []})),
    ("text-not-empty", "anthropic", anth(a_user(text(" \n")))),
    ("text-not-empty", "anthropic", anth({"role": "user", "content": "   "})),
    ("text-not-empty", "openai-chat", chat({"role": "user", "content": ""})),
    ("text-not-empty", "openai-responses", resp(u_item("\t"))),
    ("final-assistant-trailing-whitespace", "anthropic", anth(a_user(text("hi")), a_asst(text("Sure, ")))),
    ("tool-call-answered", "anthropic", anth(a_user(text("go")), a_asst(use("t1")), a_user(text("and?")))),
    (
        "tool-call-answered",
        "openai-chat",
        chat({"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [tc("c1")]}),
    ),
    ("tool-call-answered", "openai-responses", resp(u_item("go"), call_item("c1"))),
    ("tool-result-has-call", "anthropic", anth(a_user(result("t9")))),
    ("tool-result-has-call", "openai-chat", chat({"role": "tool", "tool_call_id": "c9", "content": "A"})),
    ("tool-result-has-call", "openai-responses", resp(u_item("go"), out_item("c1"), call_item("c1"))),
    (
        "wave-answered-together",
        "anthropic",
        anth(
            a_user(text("go")),
            a_asst(use("t1"), use("t2")),
            a_user(result("t1")),
            a_asst(text("one more")),
            a_user(result("t2")),
        ),
    ),
    (
        "wave-answered-together",
        "openai-chat",
        chat(
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [tc("c1"), tc("c2")]},
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "c2", "content": "B"},
        ),
    ),
    (
        "wave-answered-together",
        "openai-responses",
        resp(u_item("go"), call_item("c1"), u_item("wait"), out_item("c1")),
    ),
    (
        "tool-results-first",
        "anthropic",
        anth(a_user(text("go")), a_asst(use("t1")), a_user(text("note"), result("t1"))),
    ),
    (
        "tool-call-id-unique",
        "anthropic",
        anth(a_user(text("go")), a_asst(use("t1")), a_user(result("t1"), result("t1"))),
    ),
    (
        "tool-call-id-unique",
        "openai-chat",
        chat(
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [tc("c1"), tc("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
        ),
    ),
    (
        "tool-call-id-unique",
        "openai-responses",
        resp(u_item("go"), call_item("c1"), out_item("c1"), call_item("c1"), out_item("c1")),
    ),
    (
        "assistant-tool-form",
        "anthropic",
        anth(a_user(text("go")), {"role": "assistant", "content": "x", "tool_calls": [tc("c1")]}),
    ),
    (
        "assistant-tool-form",
        "openai-chat",
        chat(
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [tc("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
        ),
    ),
    (
        "assistant-tool-form",
        "openai-chat",
        chat({"role": "user", "content": "go"}, {"role": "assistant", "content": "x", "tool_calls": []}),
    ),
    (
        "assistant-tool-form",
        "openai-responses",
        resp(u_item("go"), {"type": "message", "role": "assistant", "content": [{"type": "function_call"}]}),
    ),
    ("thinking-first", "anthropic", anth(a_user(text("go")), a_asst(use("t1")), a_user(result("t1")), **ON)),
    ("thinking-first", "anthropic", anth(a_user(text("go")), a_asst(text("x"), THINK), a_user(text("y")))),
    (
        "thinking-signed",
        "anthropic",
        anth(
            a_user(text("go")),
            a_asst({"type": "thinking", "thinking": "p"}, use("t1")),
            a_user(result("t1")),
            **ON,
        ),
    ),
    (
        "thinking-signed",
        "anthropic",
        anth(
            a_user(text("go")),
            a_asst({"type": "redacted_thinking", "data": ""}, text("x")),
            a_user(text("y")),
        ),
    ),
    (
        "reasoning-adjacent",
        "openai-responses",
        resp(u_item("go"), {"type": "reasoning", "id": "rs_1", "summary": []}, u_item("again")),
    ),
]


def test_rule_names_are_fixed_and_unique() -> None:
    assert RULE_NAMES == tuple(r.name for r in RULES)
    assert len(set(RULE_NAMES)) == len(RULE_NAMES)
    for rule in RULES:
        assert set(rule.dialects) <= set(DIALECTS)
        assert set(rule.provider) <= set(rule.dialects)


def test_every_rule_has_a_failing_example() -> None:
    assert {rule for rule, _, _ in EXAMPLES} == set(RULE_NAMES)


@pytest.mark.parametrize(("rule", "dialect", "body"), EXAMPLES, ids=lambda x: x if isinstance(x, str) else "")
def test_example_breaks_its_rule(rule: str, dialect: str, body: Any) -> None:
    found = validate(dialect, body)
    assert rule in {v.rule for v in found}, found
    assert dialect in RULES_BY_NAME[rule].dialects
    for v in found:
        assert v.rule in RULE_NAMES
        wording = RULES_BY_NAME[v.rule].provider.get(dialect)
        assert (wording or "runfold requires:") in v.message


def test_thinking_loop_opener_is_found_across_steps() -> None:
    """Without interleaved thinking only the reply that opened the loop carries thinking."""
    body = anth(
        a_user(text("go")),
        a_asst(THINK, use("t1")),
        a_user(result("t1")),
        a_asst(use("t2")),
        a_user(result("t2"), text("user: also b")),
        **ON,
    )
    assert validate("anthropic", body) == []
    body["messages"][1]["content"] = [use("t1")]
    assert [(v.index, v.rule) for v in validate("anthropic", body)] == [(1, "thinking-first")]
    # A finished turn (the last user message carries no result) needs no thinking.
    done = anth(a_user(text("go")), a_asst(text("done")), a_user(text("thanks")), **ON)
    assert validate("anthropic", done) == []


def test_chat_tool_only_assistant_may_omit_content() -> None:
    body = chat(
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [tc("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
    )
    assert validate("openai-chat", body) == []


def test_responses_accepts_string_input_and_easy_messages() -> None:
    assert validate("openai-responses", {"model": "gpt-5", "input": "hello"}) == []
    easy = resp({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})
    assert validate("openai-responses", easy) == []


def test_responses_refuses_two_reasoning_items_in_a_row_before_a_call() -> None:
    """The API answers 400 "Item 'rs_…' of type 'reasoning' was provided without its required
    following item" for the first of two adjacent reasoning items: only the second has one."""
    r1 = {"type": "reasoning", "id": "rs_1", "encrypted_content": "e1", "summary": []}
    r2 = {"type": "reasoning", "id": "rs_2", "encrypted_content": "e2", "summary": []}
    found = validate("openai-responses", resp(u_item("go"), r1, r2, call_item("c1"), out_item("c1")))
    assert [(v.rule, v.index) for v in found] == [("reasoning-adjacent", 1)]
    assert "followed by a reasoning item" in found[0].message and "only the last" in found[0].message
    assert validate("openai-responses", resp(u_item("go"), r2, call_item("c1"), out_item("c1"))) == []


# ---- inference, errors --------------------------------------------------------------------


def test_infer_dialect_by_shape() -> None:
    assert infer_dialect({"input": []}) == "openai-responses"
    assert infer_dialect({"messages": [{"role": "system", "content": "x"}]}) == "openai-chat"
    assert infer_dialect({"messages": [], "system": "x"}) == "anthropic"
    assert infer_dialect({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5}) == "anthropic"
    assert infer_dialect({"messages": [{"role": "user", "content": "x"}]}) == "openai-chat"
    with pytest.raises(RunfoldError) as err:
        infer_dialect({"model": "x"})
    assert err.value.code is ErrorCode.INVALID_ARGS
    with pytest.raises(RunfoldError):
        infer_dialect([1, 2])


def test_unknown_dialect_is_invalid_args() -> None:
    with pytest.raises(RunfoldError) as err:
        validate("gemini", {})
    assert err.value.code is ErrorCode.INVALID_ARGS
    assert set(err.value.nearby) == set(DIALECTS)


def test_ensure_valid_refuses_with_every_violation() -> None:
    fixture = load(HISTORIES / "invalid" / "anthropic-cancel-mid-parallel-wave.json")
    with pytest.raises(RunfoldError) as err:
        ensure_valid("anthropic", fixture["request"])
    e = err.value
    assert e.code is ErrorCode.WIRE_MISMATCH
    assert e.retry.value == "no"
    assert len(e.nearby) == 3 and all("tool-call-answered" in line for line in e.nearby)
    assert "message 1" in e.subject and "3 violations" in e.subject
    assert e.display().startswith("E_WIRE_MISMATCH: cannot send the anthropic request on message 1")


def test_violation_display_and_data() -> None:
    v = Violation(2, "tool-call-answered", "what", "messages[2].tool_calls[1]")
    assert v.display() == "message 2 [tool-call-answered] messages[2].tool_calls[1]: what"
    assert Violation(None, "body-shape", "w", "$").display() == "request [body-shape] $: w"
    assert v.to_data() == {
        "index": 2,
        "message": "what",
        "path": "messages[2].tool_calls[1]",
        "rule": "tool-call-answered",
    }
