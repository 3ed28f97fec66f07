"""Property tests of the provider-grammar validator (DESIGN.md §8).

A well-formed conversation (opening, replies with text and parallel calls, every call answered
by the next message, steer text after results) is rendered into each dialect's request body by
small test-side renderers: the validator must find nothing. One random mutation of such a body
(drop a result, drop a call, duplicate an id, empty a text, put text before results, split a
wave, swap a call and its result, break thinking or reasoning) must yield at least the rule the
mutation breaks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.validate import DIALECTS, infer_dialect, validate

TEXT = st.text(alphabet="ab é<>&:/.\n", max_size=10).map(lambda s: f"t{s}.")
"""Non-blank text (whitespace and markup characters inside, never only whitespace)."""
SETTINGS = settings(max_examples=100, deadline=None)


@dataclass
class Exchange:
    """One assistant reply and the user message that follows it."""

    thinking: bool
    text: str | None
    calls: list[tuple[str, str, str]]  # (id, name, arguments JSON text)
    results: list[str]
    after: str | None  # user text after the results (or the whole next user message)


@dataclass
class Conversation:
    opening: str
    exchanges: list[Exchange]
    thinking_enabled: bool


@st.composite
def conversations(draw: st.DrawFn, need_wave: bool = False) -> Conversation:
    """A conversation runfold could send: alternating, every call answered, ends with the user."""
    thinking_enabled = draw(st.booleans())
    count = draw(st.integers(1, 4))
    wave_at = draw(st.integers(0, count - 1))
    exchanges = []
    next_id = 0
    for k in range(count):
        ncalls = draw(st.integers(0, 3))
        if need_wave and k == wave_at:
            ncalls = max(2, ncalls)
        calls = []
        for _ in range(ncalls):
            name = draw(st.sampled_from(["read_file", "list_dir"]))
            calls.append((f"call_{next_id:03d}", name, '{"path":"a.txt"}'))
            next_id += 1
        text = draw(st.none() | TEXT) if calls else draw(TEXT)
        after = draw(st.none() | TEXT) if calls else draw(TEXT)
        results = [draw(TEXT) for _ in calls]
        thinking = thinking_enabled or draw(st.booleans())
        exchanges.append(Exchange(thinking, text, calls, results, after))
    return Conversation(draw(TEXT), exchanges, thinking_enabled)


def to_anthropic(conv: Conversation) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": conv.opening}]}]
    for n, ex in enumerate(conv.exchanges):
        content: list[dict[str, Any]] = []
        if ex.thinking:
            content.append({"type": "thinking", "thinking": f"plan {n}", "signature": f"sig{n}=="})
        if ex.text is not None:
            content.append({"type": "text", "text": ex.text})
        for cid, name, args in ex.calls:
            content.append({"type": "tool_use", "id": cid, "name": name, "input": {"path": args}})
        messages.append({"role": "assistant", "content": content})
        user: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": cid, "content": res}
            for (cid, _, _), res in zip(ex.calls, ex.results, strict=True)
        ]
        if ex.after is not None:
            user.append({"type": "text", "text": ex.after})
        messages.append({"role": "user", "content": user})
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "Be careful."}
    body["messages"] = messages
    if conv.thinking_enabled:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    return body


def to_chat(conv: Conversation) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be careful."},
        {"role": "user", "content": conv.opening},
    ]
    for ex in conv.exchanges:
        msg: dict[str, Any] = {"role": "assistant", "content": ex.text}
        if ex.calls:
            msg["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in ex.calls
            ]
        messages.append(msg)
        for (cid, _, _), res in zip(ex.calls, ex.results, strict=True):
            messages.append({"role": "tool", "tool_call_id": cid, "content": res})
        if ex.after is not None:
            messages.append({"role": "user", "content": ex.after})
    return {"model": "gpt-4o", "messages": messages}


def to_responses(conv: Conversation) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": conv.opening}]}
    ]
    for n, ex in enumerate(conv.exchanges):
        if ex.thinking:
            items.append({"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": "x"})
        if ex.text is not None:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": ex.text}],
                }
            )
        for cid, name, args in ex.calls:
            items.append({"type": "function_call", "call_id": cid, "name": name, "arguments": args})
        for (cid, _, _), res in zip(ex.calls, ex.results, strict=True):
            items.append({"type": "function_call_output", "call_id": cid, "output": res})
        if ex.after is not None:
            items.append(
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ex.after}]}
            )
    return {"model": "gpt-5", "instructions": "Be careful.", "input": items}


RENDER = {"anthropic": to_anthropic, "openai-chat": to_chat, "openai-responses": to_responses}


def rules_of(dialect: str, body: Any) -> set[str]:
    return {v.rule for v in validate(dialect, body)}


@SETTINGS
@given(conversations(), st.sampled_from(DIALECTS))
def test_well_formed_conversations_pass(conv: Conversation, dialect: str) -> None:
    body = RENDER[dialect](conv)
    assert validate(dialect, body) == []
    assert infer_dialect(body) == dialect


# ---- mutations ----------------------------------------------------------------------------
# Each takes (dialect, body, data) and returns the rule the mutated body must at least break.


def _wave(conv: Conversation, data: st.DataObject, minimum: int = 1) -> Exchange:
    waves = [ex for ex in conv.exchanges if len(ex.calls) >= minimum]
    return data.draw(st.sampled_from(waves))


def _index(items: list[dict[str, Any]], pred: Any) -> int:
    return next(i for i, x in enumerate(items) if pred(x))


def _results_msg(body: dict[str, Any], cid: str) -> int:
    return _index(
        body["messages"],
        lambda m: isinstance(m["content"], list) and any(b.get("tool_use_id") == cid for b in m["content"]),
    )


def drop_result(dialect: str, body: dict[str, Any], conv: Conversation, data: st.DataObject) -> str:
    cid = data.draw(st.sampled_from(_wave(conv, data).calls))[0]
    if dialect == "anthropic":
        msg = body["messages"][_results_msg(body, cid)]
        msg["content"] = [b for b in msg["content"] if b.get("tool_use_id") != cid]
    elif dialect == "openai-chat":
        body["messages"] = [m for m in body["messages"] if m.get("tool_call_id") != cid]
    else:
        body["input"] = [
            i for i in body["input"] if not (i["type"] == "function_call_output" and i["call_id"] == cid)
        ]
    return "tool-call-answered"


def drop_call(dialect: str, body: dict[str, Any], conv: Conversation, data: st.DataObject) -> str:
    cid = data.draw(st.sampled_from(_wave(conv, data).calls))[0]
    if dialect == "anthropic":
        for msg in body["messages"]:
            msg["content"] = [b for b in msg["content"] if not (b["type"] == "tool_use" and b["id"] == cid)]
    elif dialect == "openai-chat":
        for msg in body["messages"]:
            if "tool_calls" in msg:
                msg["tool_calls"] = [tc for tc in msg["tool_calls"] if tc["id"] != cid]
    else:
        body["input"] = [
            i for i in body["input"] if not (i["type"] == "function_call" and i["call_id"] == cid)
        ]
    return "tool-result-has-call"


def duplicate_id(dialect: str, body: dict[str, Any], conv: Conversation, data: st.DataObject) -> str:
    ex = _wave(conv, data, minimum=2)
    keep, change = ex.calls[0][0], ex.calls[1][0]
    if dialect == "anthropic":
        for msg in body["messages"]:
            for b in msg["content"]:
                if b["type"] == "tool_use" and b["id"] == change:
                    b["id"] = keep
    elif dialect == "openai-chat":
        for msg in body["messages"]:
            for tc in msg.get("tool_calls") or []:
                if tc["id"] == change:
                    tc["id"] = keep
    else:
        for i in body["input"]:
            if i["type"] == "function_call" and i["call_id"] == change:
                i["call_id"] = keep
    return "tool-call-id-unique"


def empty_text(dialect: str, body: dict[str, Any], conv: Conversation, data: st.DataObject) -> str:
    blank = data.draw(st.sampled_from(["", " ", "\n\t "]))
    if dialect == "anthropic":
        body["messages"][0]["content"][0]["text"] = blank
    elif dialect == "openai-chat":
        body["messages"][1]["content"] = blank
    else:
        body["input"][0]["content"][0]["text"] = blank
    return "text-not-empty"


def text_before_results(dialect: str, body: dict[str, Any], conv: Conversation, data: st.DataObject) -> str:
    cid = _wave(conv, data).calls[0][0]
    note = {"type": "text", "text": "user: hurry up"}
    if dialect == "anthropic":
        body["messages"][_results_msg(body, cid)]["content"].insert(0, note)
        return "tool-results-first"
    if dialect == "openai-chat":
        at = _index(body["messages"], lambda m: m.get("tool_call_id") == cid)
        body["messages"].insert(at, {"role": "user", "content": "user: hurry up"})
    else:
        at = _index(body["input"], lambda i: i["type"] == "function_call_output" and i["call_id"] == cid)
        user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hurry"}]}
        body["input"].insert(at, user)
    return "wave-answered-together"


def split_wave(dialect: str, body: dict[str, Any], conv: Conversation, data: st.DataObject) -> str:
    ex = _wave(conv, data, minimum=2)
    cid = ex.calls[-1][0]
    if dialect == "anthropic":
        at = _results_msg(body, cid)
        msg = body["messages"][at]
        moved = [b for b in msg["content"] if b.get("tool_use_id") == cid]
        msg["content"] = [b for b in msg["content"] if b.get("tool_use_id") != cid]
        body["messages"].insert(at + 1, {"role": "user", "content": moved})
    elif dialect == "openai-chat":
        at = _index(body["messages"], lambda m: m.get("tool_call_id") == cid)
        body["messages"].insert(at, {"role": "user", "content": "steer in the middle"})
    else:
        at = _index(body["input"], lambda i: i["type"] == "function_call_output" and i["call_id"] == cid)
        user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "steer"}]}
        body["input"].insert(at, user)
    return "wave-answered-together"


def swap_call_and_result(dialect: str, body: dict[str, Any], conv: Conversation, data: st.DataObject) -> str:
    cid = _wave(conv, data).calls[0][0]
    if dialect == "anthropic":
        b = _results_msg(body, cid)
        msgs = body["messages"]
        msgs[b - 1], msgs[b] = msgs[b], msgs[b - 1]
    elif dialect == "openai-chat":
        msgs = body["messages"]
        a = _index(msgs, lambda m: any(tc["id"] == cid for tc in m.get("tool_calls") or []))
        b = _index(msgs, lambda m: m.get("tool_call_id") == cid)
        msgs[a], msgs[b] = msgs[b], msgs[a]
    else:
        items = body["input"]
        a = _index(items, lambda i: i["type"] == "function_call" and i["call_id"] == cid)
        b = _index(items, lambda i: i["type"] == "function_call_output" and i["call_id"] == cid)
        items[a], items[b] = items[b], items[a]
    return "tool-result-has-call"


MUTATIONS = [
    drop_result,
    drop_call,
    duplicate_id,
    empty_text,
    text_before_results,
    split_wave,
    swap_call_and_result,
]


@SETTINGS
@given(conversations(need_wave=True), st.sampled_from(DIALECTS), st.sampled_from(MUTATIONS), st.data())
def test_one_mutation_breaks_the_expected_rule(
    conv: Conversation, dialect: str, mutation: Any, data: st.DataObject
) -> None:
    body = RENDER[dialect](conv)
    assert validate(dialect, body) == []
    broken = copy.deepcopy(body)
    expected = mutation(dialect, broken, conv, data)
    found = rules_of(dialect, broken)
    assert expected in found, (mutation.__name__, found)


# ---- dialect-specific mutations -------------------------------------------------------------


@SETTINGS
@given(conversations(), st.data())
def test_anthropic_first_message_and_alternation(conv: Conversation, data: st.DataObject) -> None:
    body = to_anthropic(conv)
    dropped = copy.deepcopy(body)
    del dropped["messages"][0]
    assert "first-message-user" in rules_of("anthropic", dropped)
    doubled = copy.deepcopy(body)
    at = data.draw(st.integers(0, len(body["messages"]) - 1))
    doubled["messages"].insert(at, copy.deepcopy(body["messages"][at]))
    found = rules_of("anthropic", doubled)
    assert "roles-alternate" in found


@SETTINGS
@given(conversations(need_wave=True), st.data())
def test_anthropic_thinking_stripped_from_loop_opener(conv: Conversation, data: st.DataObject) -> None:
    conv.thinking_enabled = True
    for ex in conv.exchanges:
        ex.thinking = True
    last = conv.exchanges[-1]
    if not last.calls:
        last.calls, last.results = [("call_999", "read_file", "{}")], ["ok"]
        last.after = None
    body = to_anthropic(conv)
    assert validate("anthropic", body) == []
    broken = copy.deepcopy(body)
    opener = len(broken["messages"]) - 2
    while opener >= 2 and broken["messages"][opener - 1]["content"][0]["type"] == "tool_result":
        opener -= 2
    kind = data.draw(st.sampled_from(["strip", "move", "unsign"]))
    content = broken["messages"][opener]["content"]
    if kind == "strip":
        del content[0]
        assert "thinking-first" in rules_of("anthropic", broken)
    elif kind == "move":
        content.append(content.pop(0))
        assert "thinking-first" in rules_of("anthropic", broken)
    else:
        content[0]["signature"] = ""
        assert "thinking-signed" in rules_of("anthropic", broken)


@SETTINGS
@given(conversations(), st.data())
def test_responses_reasoning_kept_with_its_item(conv: Conversation, data: st.DataObject) -> None:
    conv.exchanges[0].thinking = True
    body = to_responses(conv)
    assert validate("openai-responses", body) == []
    items = body["input"]
    at = _index(items, lambda i: i["type"] == "reasoning")
    how = data.draw(st.sampled_from(["drop-follower", "move-to-end", "user-between"]))
    if how == "drop-follower":
        # The reasoning item loses the item it produced: the next one is a result or a user message.
        while (
            at + 1 < len(items)
            and items[at + 1]["type"] in ("message", "function_call")
            and (items[at + 1].get("role", "assistant") == "assistant")
        ):
            del items[at + 1]
    elif how == "move-to-end":
        items.append(items.pop(at))
    else:
        items.insert(
            at + 1, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
        )
    assert "reasoning-adjacent" in rules_of("openai-responses", body)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(DIALECTS),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["messages", "input", "role", "content", "type", "text", "id", "tool_calls"]),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    ),
)
def test_garbage_gives_violations_never_crashes(dialect: str, value: Any) -> None:
    for body in (value, {"messages": value}, {"input": value}, {"messages": [value]}, {"input": [value]}):
        for v in validate(dialect, body):
            assert v.rule and v.path and v.message
