"""The incremental validator against the reference `validate`: the same violations, in the same
order, for every body of a sequence of edits (append, pop, replace anywhere, thinking on/off),
valid or not; and per-request work that does not grow with history."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
ops = st.one_of(
    st.tuples(st.just("append"), messages),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("replace"), st.tuples(st.integers(0, 30), messages)),
    st.tuples(st.just("thinking"), st.booleans()),
    st.tuples(st.just("same"), st.none()),
)


@settings(max_examples=300, deadline=None)
@given(start=st.lists(messages, max_size=6), edits=st.lists(ops, max_size=25))
def test_every_body_gets_the_reference_violations(start: list[Any], edits: list[Any]) -> None:
    inc = IncrementalValidator("anthropic")
    msgs = list(start)
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
        body: dict[str, Any] = {"model": "m", "max_tokens": 5, "messages": list(msgs)}
        if thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        assert inc.validate(body) == validate("anthropic", body)


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
