"""Tool results and tool errors as ledger-ready JSON objects (DESIGN.md §4 `tool_result`, §11).

A tool answers with a float-free JSON object (`tool_result.result`) or a §11 error object
(`tool_result.error`). `ToolError` is a `RunfoldError` that may carry a little structured detail
(e.g. the partial output of a command that timed out); `result_object` turns whatever a user's
function returned into a float-free object.
"""

from __future__ import annotations

import json
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
      because the ledger holds no floats (DESIGN.md §3) — the text keeps the exact numbers.

    Raises `TypeError` when the value cannot be converted to JSON at all.
    """
    try:
        jsonable = to_jsonable_python(value)
    except Exception as exc:  # pydantic raises PydanticSerializationError
        raise TypeError(f"a tool returned a {type(value).__name__}, which is not JSON: {exc}") from None
    try:
        check_json(jsonable, "result")
    except RunfoldError:
        return {"json": json.dumps(jsonable, sort_keys=True, separators=(",", ":"), ensure_ascii=False)}
    if isinstance(jsonable, dict):
        return jsonable
    return {"value": jsonable}
