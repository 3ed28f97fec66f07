"""The content block model (DESIGN.md §8): the constructors, and `check_block`, the one reader
of blocks from JSON, against the TypedDict classes it is derived from."""

from __future__ import annotations

import typing

import orjson
import pytest

from runfold.core import messages as m
from runfold.core.errors import ErrorCode, RunfoldError

CLASSES = {
    "text": m.TextBlock,
    "thinking": m.ThinkingBlock,
    "redacted_thinking": m.RedactedThinkingBlock,
    "tool_use": m.ToolUseBlock,
    "tool_result": m.ToolResultBlock,
    "image": m.ImageBlock,
}


def test_every_member_of_the_union_is_a_kind_and_the_schemas_follow_the_classes() -> None:
    assert set(typing.get_args(m.Block)) == set(CLASSES.values())
    assert frozenset(CLASSES) == m.BLOCK_KINDS
    for kind, cls in CLASSES.items():
        assert typing.get_args(typing.get_type_hints(cls)["kind"]) == (kind,)
        required = {key for key, _, req in m.SCHEMAS[kind] if req}
        optional = {key for key, _, req in m.SCHEMAS[kind] if not req}
        assert required == cls.__required_keys__ - {"kind"}
        assert optional == cls.__optional_keys__


def test_constructors_build_the_wire_bytes() -> None:
    assert orjson.dumps(m.text_block("hi")) == b'{"kind":"text","text":"hi"}'
    assert orjson.dumps(m.tool_use_block("c1", "read", '{"a":1.50}')) == (
        b'{"kind":"tool_use","id":"c1","name":"read","input":"{\\"a\\":1.50}"}'
    )
    assert orjson.dumps(m.tool_result_block("c1", "{}", False)) == (
        b'{"kind":"tool_result","tool_use_id":"c1","content":"{}","is_error":false}'
    )
    assert orjson.dumps(m.thinking_block("t", "sig", dialect="openai-responses", id="rs_1", model="x")) == (
        b'{"kind":"thinking","thinking":"t","signature":"sig",'
        b'"dialect":"openai-responses","id":"rs_1","model":"x"}'
    )
    assert m.thinking_block("t", "sig") == {"kind": "thinking", "thinking": "t", "signature": "sig"}
    assert m.redacted_thinking_block("d", model="x") == {"kind": "redacted_thinking", "data": "d", "model": "x"}


def test_check_block_returns_the_block_itself_with_unknown_keys_kept() -> None:
    raw = {"kind": "text", "text": "hi", "later": 1}
    assert m.check_block(raw) is raw


@pytest.mark.parametrize(
    ("raw", "action"),
    [
        ([], "read content block"),
        ({"kind": "video"}, "read content block of kind 'video'"),
        ({"kind": ["text"]}, "read content block of kind ['text']"),
        ({"kind": "tool_use", "id": "c", "name": "n"}, "read tool_use block (no 'input')"),
        ({"kind": "text", "text": 3}, "read text block ('text' is not a string)"),
        ({"kind": "tool_result", "tool_use_id": "c", "content": "", "is_error": 0}, "('is_error' is not a boolean)"),
        ({"kind": "thinking", "thinking": "", "signature": "", "model": None}, "('model' is not a string)"),
    ],
)
def test_check_block_refuses_naming_the_key(raw: object, action: str) -> None:
    with pytest.raises(RunfoldError) as err:
        m.check_block(raw, "data.message.content[0]")
    assert err.value.code is ErrorCode.INVALID_ARGS
    assert action in err.value.action
    assert err.value.subject.startswith("data.message.content[0]")


def test_reply_blocks_reads_an_empty_message_as_no_content() -> None:
    assert m.reply_blocks({}) == []
    with pytest.raises(RunfoldError):
        m.reply_blocks({"content": [{"kind": "text"}]})
