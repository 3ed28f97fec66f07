"""Byte attribution of a rendered request (`core.render.attribution`, DESIGN.md §10): over
generated conversations in every dialect the spans tile the exact bytes `request_bytes` gives,
every call and result is owned by its own block's line, every sent segment by its line, and the
framing follows the documented rule."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_render_props import MODELS, conversations, segments, tool_tables

from runfold.core.messages import message, text_block, tool_result_block, tool_use_block
from runfold.core.render import DIALECTS, RequestSpec, SystemSegment, ToolSpec, render, request_bytes
from runfold.core.render.attribution import Attributed, Owner, attribute_request
from runfold.core.render.spec import is_sent

ENVELOPE: Owner = (2, "seed")
TOOLS: Owner = (3, "seed")


def owners_of(msgs: list[dict[str, Any]]) -> list[list[Owner]]:
    """A distinct owner per block: seq 100 + its flat index."""
    out: list[list[Owner]] = []
    n = 100
    for m in msgs:
        row = []
        for _ in m["content"]:
            row.append((n, "model_reply" if m["role"] == "assistant" else "message"))
            n += 1
        out.append(row)
    return out


def owner_at(att: Attributed, offset: int) -> Owner:
    return next(s.owner for s in att.spans if s.start <= offset < s.end)


@settings(max_examples=200, deadline=None)
@given(conversations(), segments, tool_tables, st.sampled_from(DIALECTS))
def test_spans_tile_the_request_and_each_call_and_result_is_its_blocks(
    msgs: list[dict[str, Any]], system: list[SystemSegment], tools: list[ToolSpec], dialect: str
) -> None:
    spec = RequestSpec(model=MODELS[dialect], messages=msgs, system=system, tools=tools, cache_key="k")
    sources = owners_of(msgs)
    seg_owners = {seg.slot: (10 + k, "seed") for k, seg in enumerate(system)}
    att = attribute_request(dialect, spec, sources, segments=seg_owners, tools=TOOLS, envelope=ENVELOPE)
    assert att.body == request_bytes(render(dialect, spec))
    at = 0
    for span in att.spans:
        assert span.start == at < span.end
        at = span.end
    assert at == len(att.body) == sum(att.by_owner().values()) == sum(att.by_cause().values())
    assert all(a.owner != b.owner for a, b in zip(att.spans, att.spans[1:], strict=False))
    owned = att.by_owner()
    for i, m in enumerate(msgs):
        for j, b in enumerate(m["content"]):
            if b["kind"] not in ("tool_use", "tool_result"):
                continue
            key = b["id"] if b["kind"] == "tool_use" else b["tool_use_id"]
            hits = [owner_at(att, x.start()) for x in re.finditer(re.escape(f'"{key}"').encode(), att.body)]
            assert sources[i][j] in hits, (dialect, key)
            assert owned[sources[i][j]] > 0
    if tools:
        assert owned.get(TOOLS, 0) > 0
    for seg in system:
        if is_sent(seg):
            assert owned.get(seg_owners[seg.slot], 0) >= len(seg.text.strip().encode())


def test_the_framing_rule_by_example() -> None:
    msgs = [
        message("user", [text_block("user: hi")]),
        message("assistant", [text_block("ok"), tool_use_block("c1", "f", '{"a":1}')]),
        message("user", [tool_result_block("c1", "{}", False), text_block("runtime: more")]),
    ]
    sources = [[(1, "seed")], [(5, "model_reply"), (6, "model_reply")], [(7, "tool_result"), (9, "message")]]
    spec = RequestSpec(
        model="m", system=[SystemSegment("ws", "Work"), SystemSegment("run", "Run", edge=True)], messages=msgs
    )
    segs = {"ws": (2, "seed"), "run": (3, None)}
    a = attribute_request("anthropic", spec, sources, segments=segs, tools=TOOLS, envelope=ENVELOPE)
    text = {a.body[s.start : s.end]: s.owner for s in a.spans}
    # the tail breakpoint belongs to the block carrying it; the wire message to its first block
    assert text[b'{"type":"text","text":"runtime: more","cache_control":{"type":"ephemeral"}}'] == (9, "message")
    assert any(k.startswith(b'{"role":"user","content":[{"type":"tool_result"') and v == (7, "tool_result") for k, v in text.items())
    assert text[b'{"type":"text","text":"Run","cache_control":{"type":"ephemeral"}}'] == (3, None)
    assert a.body.startswith(b'{"model":"m"') and owner_at(a, 0) == ENVELOPE
    chat = attribute_request("openai-chat", spec, sources, segments=segs, tools=TOOLS, envelope=ENVELOPE)
    start = chat.body.index(b'"Work\\n\\nRun"')
    assert owner_at(chat, start) == owner_at(chat, start + 4) == (2, "seed")  # the opening quote and Work
    assert owner_at(chat, start + 5) == owner_at(chat, start + 12) == (3, None)  # the blank line and Run
    assert chat.by_cause()[None] == len('\\n\\nRun"')
