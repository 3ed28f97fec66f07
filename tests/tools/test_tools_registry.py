"""A user's typed Python function becomes a tool: golden schema, validation naming the field,
sync and async calls, docstring parsing, and a tool table that is byte-stable across processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.tools import (
    BUILTIN_NAMES,
    Tool,
    ToolContext,
    ToolRegistry,
    builtin_registry,
    result_object,
    tool,
)
from runfold.tools.docstrings import parse_docstring


def count_words(
    text: str,
    min_len: int,
    stop: list[str],
    limit: Optional[int] = None,  # noqa: UP045 (the Optional spelling is what users write)
    mode: Literal["exact", "fold"] = "exact",
) -> dict[str, int]:
    """Count the words of a text.

    Words shorter than `min_len` are ignored.

    Args:
        text: The text to count in.
        min_len (int): Shortest word that counts,
            in characters.
        stop: Words never counted.
        limit: Stop after this many words.
        mode: `fold` compares case-insensitively.

    Returns:
        {"words": n}
    """
    words = [w for w in text.split() if len(w) >= min_len]
    if mode == "fold":
        words = [w.lower() for w in words]
    words = [w for w in words if w not in stop]
    if limit is not None:
        words = words[:limit]
    return {"words": len(words)}


async def slow_echo(message: str, times: int = 1) -> str:
    """Echo a message.

    Parameters
    ----------
    message : str
        What to echo.
    times : int
        How often.
    """
    await asyncio.sleep(0)
    return " ".join([message] * times)


GOLDEN_COUNT_WORDS = (
    '{"description":"Count the words of a text.\\n\\nWords shorter than `min_len` are ignored.",'
    '"input_schema":{"additionalProperties":false,"properties":{'
    '"limit":{"anyOf":[{"type":"integer"},{"type":"null"}],"default":null,"description":"Stop after this many words."},'
    '"min_len":{"description":"Shortest word that counts, in characters.","type":"integer"},'
    '"mode":{"default":"exact","description":"`fold` compares case-insensitively.","enum":["exact","fold"],"type":"string"},'
    '"stop":{"description":"Words never counted.","items":{"type":"string"},"type":"array"},'
    '"text":{"description":"The text to count in.","type":"string"}},'
    '"required":["text","min_len","stop"],"type":"object"},"name":"count_words"}'
)


def test_typed_function_schema_is_golden() -> None:
    reg = ToolRegistry([count_words])
    assert reg.tool_table_bytes() == b"[" + GOLDEN_COUNT_WORDS.encode() + b"]"
    t = reg.require("count_words")
    assert t.effect == "read"
    # property order in the schema follows the signature (the canonical bytes sort keys)
    assert list(t.input_schema["properties"]) == ["text", "min_len", "stop", "limit", "mode"]


def test_async_function_numpy_docstring_schema() -> None:
    t = Tool.from_function(slow_echo, effect="write")
    assert t.spec() == {
        "name": "slow_echo",
        "description": "Echo a message.",
        "input_schema": {
            "additionalProperties": False,
            "properties": {
                "message": {"description": "What to echo.", "type": "string"},
                "times": {"default": 1, "description": "How often.", "type": "integer"},
            },
            "required": ["message"],
            "type": "object",
        },
    }
    assert t.effect == "write" and t.is_async


def test_sync_and_async_tools_are_called_with_validated_args(ctx: ToolContext) -> None:
    sync = Tool.from_function(count_words)
    args = sync.validate({"text": "a bb CC cc dd", "min_len": "2", "stop": ["dd"], "mode": "fold"})
    assert args["min_len"] == 2  # lax coercion of "2", as pydantic validates
    assert asyncio.run(sync.invoke(args, ctx)) == {"words": 3}
    a = Tool.from_function(slow_echo)
    assert asyncio.run(a.invoke(a.parse_args('{"message": "hi", "times": 2}'), ctx)) == {"value": "hi hi"}
    # decorated functions stay callable
    assert count_words("x yy", 2, []) == {"words": 1}


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        ({"min_len": 1, "stop": []}, "text", "is required"),
        ({"text": "t", "min_len": "many", "stop": []}, "min_len", "valid integer"),
        ({"text": "t", "min_len": 1, "stop": "nope"}, "stop", "valid list"),
        ({"text": "t", "min_len": 1, "stop": [1]}, "stop.0", "valid string"),
        ({"text": "t", "min_len": 1, "stop": [], "mode": "loud"}, "mode", "'exact' or 'fold'"),
        ({"text": "t", "min_len": 1, "stop": [], "limt": 3}, "limt", "not a parameter"),
    ],
)
def test_argument_errors_name_the_field(args: dict[str, object], field: str, says: str) -> None:
    t = Tool.from_function(count_words)
    with pytest.raises(RunfoldError) as info:
        t.validate(args)
    err = info.value
    assert err.code is ErrorCode.INVALID_ARGS
    assert err.subject == f"argument `{field}`"
    assert says in err.recovery
    if field == "limt":
        assert err.nearby == ("limit",)


def test_argument_text_must_be_a_json_object() -> None:
    t = Tool.from_function(count_words)
    for text, says in [('{"text": ', "not valid JSON"), ("[1, 2]", "must be a JSON object")]:
        with pytest.raises(RunfoldError) as info:
            t.parse_args(text)
        assert info.value.code is ErrorCode.INVALID_ARGS and says in info.value.recovery


def test_context_parameter_is_injected_and_hidden(ctx: ToolContext) -> None:
    def where(name: str, *, ctx: ToolContext) -> str:
        """Say where a file would go."""
        return f"{ctx.room}/{name}"

    t = Tool.from_function(where)
    assert list(t.input_schema["properties"]) == ["name"]
    assert asyncio.run(t.invoke(t.validate({"name": "a"}), ctx)) == {"value": "lab/room1/a"}


def test_bad_functions_are_refused_at_registration() -> None:
    def no_hint(x) -> int:  # type: ignore[no-untyped-def]
        """Doc."""
        return 1

    def no_doc(x: int) -> int:
        return x

    def var(*xs: int) -> int:
        """Doc."""
        return 0

    for fn, says in [(no_hint, "type hint"), (no_doc, "docstring"), (var, "*args")]:
        with pytest.raises(RunfoldError) as info:
            Tool.from_function(fn)
        assert info.value.code is ErrorCode.INVALID_ARGS and says in info.value.recovery
    with pytest.raises(RunfoldError, match="letters, digits"):
        Tool.from_function(count_words, name="count words")
    with pytest.raises(RunfoldError, match="effect"):
        Tool.from_function(count_words, effect="maybe")  # type: ignore[arg-type]
    reg = ToolRegistry([count_words])
    with pytest.raises(RunfoldError, match="already registered"):
        reg.add(count_words)
    assert reg.add(count_words, name="count_words_2").name == "count_words_2"


def test_decorator_forms() -> None:
    @tool
    def plain(n: int) -> int:
        """Plain."""
        return n

    @tool(name="renamed", effect="write")
    def fancy(path: str) -> str:
        """Fancy."""
        return path

    assert isinstance(plain, Tool) and plain(3) == 3
    assert fancy.name == "renamed" and fancy.effect == "write" and fancy.subject_param == "path"
    assert fancy.subject_of({"path": "a.txt"}) == "a.txt"


def test_unknown_tool_names_nearby() -> None:
    reg = builtin_registry()
    with pytest.raises(RunfoldError) as info:
        reg.require("read_fil")
    assert info.value.code is ErrorCode.TOOL_UNKNOWN
    assert info.value.nearby[0] == "read_file"
    assert reg.names() == list(BUILTIN_NAMES)
    assert builtin_registry(["exec", "read_file"]).names() == ["exec", "read_file"]


def test_result_objects_are_float_free() -> None:
    @dataclass
    class Point:
        x: int
        y: int

    assert result_object({"a": 1}) == {"a": 1}
    assert result_object(Point(1, 2)) == {"x": 1, "y": 2}
    assert result_object([1, "b"]) == {"value": [1, "b"]}
    assert result_object(None) == {"value": None}
    assert result_object(Path("a/b")) == {"value": "a/b"}
    assert result_object({"ratio": 0.5, "n": 10}) == {"json": '{"n":10,"ratio":0.5}'}
    assert result_object({"big": 1 << 70}) == {"json": '{"big":1180591620717411303424}'}


def test_docstring_parser_sections() -> None:
    parsed = parse_docstring(
        """Summary line.

        More text.

        Args:
            a (int): First.
            b: Second,
                continued.

        Raises:
            ValueError: never.
        """
    )
    assert parsed.description == "Summary line.\n\nMore text."
    assert parsed.params == {"a": "First.", "b": "Second, continued."}
    assert parse_docstring(None).description == ""
    assert parse_docstring("Just text.").params == {}


TABLE_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from test_tools_registry import count_words, slow_echo
    from runfold.tools import ToolRegistry, builtin_registry
    reg = builtin_registry()
    reg.add(count_words)
    reg.add(slow_echo)
    sys.stdout.write(reg.tool_table_bytes().decode())
    """
)


def test_tool_table_bytes_are_stable_across_processes() -> None:
    reg = builtin_registry()
    reg.add(count_words)
    reg.add(slow_echo)
    here = str(Path(__file__).parent)
    other = subprocess.run(
        [sys.executable, "-c", TABLE_SCRIPT.format(here=here)],
        capture_output=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert other == reg.tool_table_bytes()
    table = json.loads(reg.tool_table_bytes())
    assert [row["name"] for row in table] == [*BUILTIN_NAMES, "count_words", "slow_echo"]
    for row in table:
        assert row["description"].strip() and row["input_schema"]["type"] == "object"


def test_description_paragraphs_are_reflowed_but_lists_keep_their_lines() -> None:
    doc = "Do a thing\nover two lines.\n\n- one\n- two\n\n    code\n    more\n\nEnd\nhere.\n\nArgs:\n    x: An\n        x.\n"
    parsed = parse_docstring(doc)
    assert (
        parsed.description == "Do a thing over two lines.\n\n- one\n- two\n\n    code\n    more\n\nEnd here."
    )
    assert parsed.params == {"x": "An x."}
