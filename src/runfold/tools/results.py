"""Tool results and tool errors as ledger-ready JSON objects (DESIGN.md §4 `tool_result`, §11).

A tool answers with a float-free JSON object (`tool_result.result`) or a §11 error object
(`tool_result.error`). `ToolError` is a `RunfoldError` that may carry a little structured detail
(e.g. the partial output of a command that timed out); `result_object` turns whatever a user's
function returned into a float-free object.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from runfold.core.canonical import Json, check_json
from runfold.core.errors import RunfoldError


@dataclass(eq=False)
class ToolError(RunfoldError):
    """A §11 error from a tool, plus `detail`: a float-free JSON object written under the key
    `detail` of the error payload (readers that do not know it keep it as an extra key)."""

    detail: dict[str, Json] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        data = super().to_data()
        if self.detail:
            data["detail"] = self.detail
        return data


def result_object(value: Any) -> dict[str, Json]:
    """The `tool_result.result` object for a tool's return value.

    - a JSON object without floats (after converting dataclasses, pydantic models, paths, ...
      with pydantic's `to_jsonable_python`) is used as is;
    - any other float-free JSON value `v` (str, int, list, None, ...) becomes `{"value": v}`;
    - a value holding floats or integers outside i64/u64 becomes `{"json": "<compact JSON text>"}`,
      because the ledger holds no floats (DESIGN.md §3) — the text keeps the exact numbers;
    - text that is not valid Unicode (lone surrogates) is replaced by U+FFFD and counted under
      `INVALID_TEXT_KEY`.

    Raises `TypeError` when the value cannot be converted to JSON at all.
    """
    try:
        jsonable = to_jsonable_python(value)
    except Exception as exc:  # pydantic raises PydanticSerializationError
        raise TypeError(f"a tool returned a {type(value).__name__}, which is not JSON: {exc}") from None
    jsonable, replaced = _replace_surrogates(jsonable)
    try:
        check_json(jsonable, "result")
    except RunfoldError:
        obj: dict[str, Json] = {
            "json": json.dumps(jsonable, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        }
    else:
        obj = jsonable if isinstance(jsonable, dict) else {"value": jsonable}
    return {**obj, INVALID_TEXT_KEY: replaced} if replaced else obj


INVALID_TEXT_KEY = "invalid_text_replaced"
"""The key a tool's result or error object gains when some of its text was not valid Unicode
(lone surrogates, e.g. a file name's undecodable bytes): how many code points were replaced by
U+FFFD. The ledger holds only valid UTF-8 (DESIGN.md §3); the replacement is recorded, not hidden."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_surrogates(value: Any) -> tuple[Any, int]:
    """`value` with every lone surrogate in its keys and strings replaced by U+FFFD, and how
    many were (`value` itself when none was)."""
    count = 0

    def fix(item: Any) -> Any:
        nonlocal count
        if isinstance(item, str):
            if item.isascii():
                return item
            fixed, n = _SURROGATE.subn("\ufffd", item)
            count += n
            return fixed
        if isinstance(item, dict):
            return {fix(k): fix(v) for k, v in item.items()}
        if isinstance(item, list):
            return [fix(v) for v in item]
        return item

    fixed = fix(value)
    return (fixed, count) if count else (value, 0)


def valid_text(obj: dict[str, Json]) -> dict[str, Json]:
    """`obj` (a result or error object) with every lone surrogate in its keys and strings
    replaced by U+FFFD and `INVALID_TEXT_KEY` set to how many were; `obj` itself when none was."""
    fixed, count = _replace_surrogates(obj)
    if not count:
        return obj
    return {**fixed, INVALID_TEXT_KEY: count}
