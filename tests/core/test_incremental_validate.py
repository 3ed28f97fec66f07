"""The incremental validator against the reference `validate`: the same violations, in the same
order, for every body of a sequence of edits (append, pop, replace anywhere, thinking on/off),
valid or not; and per-request work that does not grow with history."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.core.messages import message, text_block, tool_result_block, tool_use_block
from runfold.core.render import RequestSpec
from runfold.core.render.incremental import IncrementalRenderer
from runfold.core.validate import DIALECTS, validate
from runfold.core.validate.incremental import IncrementalValidator

IDS = st.sampled_from(["a", "b", "c"])
blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.sampled_from(["ok", "", " ", "end "])),
    st.builds(
        lambda i, inp: {"type": "tool_use", "id": i, "name": "read", "input": inp},
        IDS,
        st.sampled_from([{}, {"p": 1}, "x"]),
    ),
    st.builds(
        lambda i, err: {"type": "tool_result", "tool_use_id": i, "content": "r", **err},
        IDS,
        st.sampled_from([{}, {"is_error": True}, {"is_error": "no"}]),
    ),
    st.builds(
        lambda sig: {"type": "thinking", "thinking": "t", "signature": sig}, st.sampled_from(["S", ""])
    ),
    st.just({"type": "redacted_thinking", "data": "D"}),
    st.just({"type": "bogus"}),
    st.just(7),
)
messages = st.one_of(
    st.builds(
        lambda role, content: {"role": role, "content": content},
        st.sampled_from(["user", "assistant", "user", "assistant", "system"]),
        st.one_of(st.lists(blocks, max_size=4), st.sampled_from(["hi", "", "x "])),
    ),
    st.just("junk"),
)
chat_calls = st.lists(
    st.one_of(
        st.builds(
            lambda i: {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}}, IDS
        ),
        st.just({"type": "function"}),
        st.just("x"),
    ),
    max_size=3,
)
chat_messages = st.one_of(
    st.builds(
        lambda role, content: {"role": role, "content": content},
        st.sampled_from(["user", "system", "developer", "function"]),
        st.sampled_from(["hi", "", " ", None, [], [{"type": "text", "text": "a"}], [{"type": "image_url"}]]),
    ),
    st.builds(
        lambda content, calls: {"role": "assistant", "content": content, **calls},
        st.sampled_from(["ok", None, " ", [{"type": "tool_use"}]]),
        st.one_of(st.just({}), st.builds(lambda c: {"tool_calls": c}, chat_calls)),
    ),
    st.builds(
        lambda i, content: {"role": "tool", "tool_call_id": i, "content": content},
        st.one_of(IDS, st.just(5)),
        st.sampled_from(["r", "", None]),
    ),
    st.just(3),
)
response_items = st.one_of(
    st.builds(
        lambda role, content: {"type": "message", "role": role, "content": content},
        st.sampled_from(["user", "assistant", "system", "tool"]),
        st.sampled_from(["hi", " ", [], [{"type": "input_text", "text": "a"}], [{"type": "tool_use"}]]),
    ),
    st.builds(lambda role: {"role": role, "content": "easy"}, st.sampled_from(["user", "assistant"])),
    st.builds(
        lambda i, args: {"type": "function_call", "call_id": i, "name": "read", "arguments": args},
        IDS,
        st.sampled_from(["{}", 1]),
    ),
    st.builds(lambda i: {"type": "function_call_output", "call_id": i, "output": "r"}, IDS),
    st.builds(lambda extra: {"type": "reasoning", **extra}, st.sampled_from([{"summary": []}, {"id": "rs"}])),
    st.just({"type": "web_search_call"}),
    st.just({"type": "nope"}),
    st.just(None),
)
clean_blocks = st.one_of(
    st.just({"type": "text", "text": "ok"}),
    st.builds(lambda i: {"type": "tool_use", "id": i, "name": "read", "input": {}}, IDS),
    st.builds(lambda i: {"type": "tool_result", "tool_use_id": i, "content": "r"}, IDS),
    st.just({"type": "thinking", "thinking": "t", "signature": "S"}),
)
clean_messages = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "assistant"]),
    st.lists(clean_blocks, min_size=1, max_size=3),
)
ITEMS = {
    "anthropic": st.one_of(messages, clean_messages, clean_messages),
    "openai-chat": chat_messages,
    "openai-responses": response_items,
}


def body_of(dialect: str, items: list[Any], thinking: bool) -> dict[str, Any]:
    if dialect == "openai-responses":
        return {"model": "m", "input": list(items)}
    body: dict[str, Any] = {"model": "m", "messages": list(items)}
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    return body


@settings(max_examples=300, deadline=None)
@given(dialect=st.sampled_from(DIALECTS), data=st.data())
def test_every_body_gets_the_reference_violations(dialect: str, data: st.DataObject) -> None:
    item = ITEMS[dialect]
    ops = st.one_of(
        st.tuples(st.just("append"), item),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("replace"), st.tuples(st.integers(0, 30), item)),
        st.tuples(st.just("thinking"), st.booleans()),
        st.tuples(st.just("same"), st.none()),
    )
    msgs = data.draw(st.lists(item, max_size=6))
    edits = data.draw(st.lists(ops, max_size=25))
    inc = IncrementalValidator(dialect)
    thinking = False
    for op, arg in [("same", None), *edits]:
        if op == "append":
            msgs.append(arg)
        elif op == "pop" and msgs:
            msgs.pop()
        elif op == "replace" and msgs:
            msgs[arg[0] % len(msgs)] = arg[1]
        elif op == "thinking":
            thinking = arg
        body = body_of(dialect, msgs, thinking)
        assert inc.validate(body) == validate(dialect, body)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_malformed_bodies_fall_back_to_the_reference(dialect: str) -> None:
    inc = IncrementalValidator(dialect)
    for body in [None, [], {}, {"messages": []}, {"messages": "x"}, {"input": []}]:
        assert inc.validate(body) == validate(dialect, body)


def test_work_per_request_does_not_grow_with_history() -> None:
    def per_turn(turns: int) -> list[int]:
        inc = IncrementalValidator("anthropic")
        msgs: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
        costs = []
        for t in range(turns):
            before = inc.checked
            body = {"model": "m", "max_tokens": 5, "messages": list(msgs), "thinking": {"type": "enabled"}}
            assert inc.validate(body) == [] or t == 0
            costs.append(inc.checked - before)
            msgs.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t", "signature": "S"},
                        {"type": "tool_use", "id": f"c{t}", "name": "r", "input": {}},
                    ],
                }
            )
            msgs.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"c{t}", "content": "ok"}],
                }
            )
        return costs

    short, long = per_turn(10), per_turn(1000)
    assert max(short[1:]) == max(long[1:]) <= 3


@pytest.mark.parametrize("dialect", DIALECTS)
def test_rendered_tool_loop_checks_a_bounded_number_of_messages_per_request(dialect: str) -> None:
    """Renderer and validator together, as the run loop uses them: messages checked per request
    are the same at 10 and at 1,000 turns, and every body passes."""

    def per_turn(turns: int) -> list[int]:
        renderer = IncrementalRenderer(dialect, RequestSpec(model="m", cache_key="k"))
        inc = IncrementalValidator(dialect)
        msgs: list[Any] = [message("user", [text_block("go")])]
        costs = []
        for t in range(turns):
            before = inc.checked
            assert inc.validate(renderer.render(msgs).body) == []
            costs.append(inc.checked - before)
            msgs.append(message("assistant", [tool_use_block(f"c{t}", "read", "{}")]))
            msgs.append(message("user", [tool_result_block(f"c{t}", "ok", False)]))
        return costs

    short, long = per_turn(10), per_turn(1000)
    assert max(short[1:]) == max(long[1:]) <= 4
