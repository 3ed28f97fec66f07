"""The incremental renderer against the reference `render_request`: byte-identical bodies and the
same breakpoints (and, fed to the incremental validator, the reference's violations) at every step of conversations grown block by block (messages appended, the
open last message extended, an unsent reply popped), in every dialect; and per-request work that
does not grow with history."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant

import core.test_conversation_stateful as stateful
from core.test_render_props import MODELS, conversations
from runfold.core.conversation import _content_counts
from runfold.core.messages import message, text_block, tool_result_block, tool_use_block
from runfold.core.render import DIALECTS, RequestSpec, SystemSegment, ToolSpec, render_request, request_bytes
from runfold.core.render.incremental import IncrementalRenderer
from runfold.core.validate import validate
from runfold.core.validate.incremental import IncrementalValidator

SYSTEM = (SystemSegment("workspace", "be brief", edge=True), SystemSegment("run", "the task"))
TOOLS = (ToolSpec("read", "read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),)


def base_spec(dialect: str, **kw: Any) -> RequestSpec:
    return RequestSpec(model=MODELS[dialect], system=SYSTEM, tools=TOOLS, cache_key="k", **kw)


def assert_same(inc: IncrementalRenderer, spec: RequestSpec, msgs: list[dict[str, Any]]) -> None:
    ref = render_request(
        inc.dialect, replace(spec, messages=[dict(m, content=list(m["content"])) for m in msgs])
    )
    got, raw = inc.render_bytes(msgs)
    assert raw == request_bytes(got.body) == request_bytes(ref.body)
    assert got.breakpoints == ref.breakpoints


@settings(max_examples=120, deadline=None)
@given(
    msgs=conversations(),
    dialect=st.sampled_from(DIALECTS),
    breakpoints=st.booleans(),
    thinking=st.sampled_from([None, {"type": "enabled", "budget_tokens": 1024}, {"effort": "low"}]),
    stream=st.booleans(),
    temperature=st.sampled_from([None, 0, 700, 1234]),
    data=st.data(),
)
def test_grown_block_by_block_equals_the_reference(
    msgs: list[dict[str, Any]],
    dialect: str,
    breakpoints: bool,
    thinking: Any,
    stream: bool,
    temperature: int | None,
    data: st.DataObject,
) -> None:
    spec = base_spec(
        dialect,
        cache_breakpoints=breakpoints,
        thinking=thinking,
        stream=stream,
        temperature_milli=temperature,
    )
    inc = IncrementalRenderer(dialect, spec)
    live: list[dict[str, Any]] = []
    for msg in msgs:
        cur = {"role": msg["role"], "content": []}
        live.append(cur)
        for block in msg["content"]:
            cur["content"].append(block)  # extended in place, like the open message of a Conversation
            assert_same(inc, spec, live)
        if msg["role"] == "assistant" and data.draw(st.booleans()):
            live.pop()  # an unsent reply dropped (a cut wave), then written again
            assert_same(inc, spec, live)
            live.append(cur)
            assert_same(inc, spec, live)
        if data.draw(st.booleans()):
            assert_same(inc, spec, live)  # the same request again (a retried call)
    if data.draw(st.booleans()):
        copies = [dict(m, content=list(m["content"])) for m in live]  # new objects: all rendered again
        assert_same(inc, spec, copies)


def test_a_refused_message_resets_the_renderer() -> None:
    spec = base_spec("anthropic")
    inc = IncrementalRenderer("anthropic", spec)
    good = [message("user", [text_block("hi")])]
    assert_same(inc, spec, good)
    bad = [*good, {"role": "system", "content": []}]
    with pytest.raises(Exception, match="role"):
        inc.render(bad)
    assert_same(inc, spec, good)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_work_per_request_does_not_grow_with_history(dialect: str) -> None:
    """Messages rendered per request in a tool loop: the same at 10 and at 1,000 turns."""

    def per_turn(turns: int) -> list[int]:
        inc = IncrementalRenderer(
            dialect, base_spec(dialect, thinking={"type": "enabled", "budget_tokens": 9})
        )
        msgs: list[dict[str, Any]] = [message("user", [text_block("go")])]
        costs = []
        for t in range(turns):
            before = inc.rendered + inc.walked
            inc.render_bytes(msgs)
            costs.append(inc.rendered + inc.walked - before)
            msgs.append(message("assistant", [tool_use_block(f"c{t}", "read", '{"path":"a"}')]))
            msgs.append(message("user", [tool_result_block(f"c{t}", "ok", False)]))
        return costs

    short, long = per_turn(10), per_turn(1000)
    assert max(short[1:]) == max(long[1:]) <= 5


class IncrementalMachine(stateful.ConversationMachine):
    """The conversation state machine, with one incremental renderer per dialect fed the
    conversation's own messages (`messages_view`) after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.renderers = {
            (d, bp): IncrementalRenderer(d, replace(self.spec(breakpoints=bp), messages=()))
            for d in DIALECTS
            for bp in (True, False)
        }
        self.validators = {key: IncrementalValidator(key[0]) for key in self.renderers}

    @invariant()
    def kept_block_counts_match_the_messages(self) -> None:
        assert self.conv._counts == _content_counts(self.conv.messages)

    @invariant()
    def incremental_bodies_equal_the_reference(self) -> None:
        view = self.conv.messages_view()
        if not view:
            return
        for (dialect, bp), inc in self.renderers.items():
            ref = render_request(dialect, self.spec(breakpoints=bp))
            got, raw = inc.render_bytes(view)
            assert raw == request_bytes(got.body) == request_bytes(ref.body), dialect
            assert got.breakpoints == ref.breakpoints
            found = self.validators[dialect, bp].validate(got.body)
            assert found == validate(dialect, ref.body)


TestIncrementalMachine = IncrementalMachine.TestCase
TestIncrementalMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
