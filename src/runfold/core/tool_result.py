"""The one printer of tool blocks, shared by the live turn and every fold (DESIGN.md §6).

A `tool_result` line becomes a `tool_result` block whose content is the compact canonical JSON
of its result or error object; a `tool_called` line becomes the `tool_use` block a reply stored
without its calls (the foreign `{}` replies) is missing. One function each, so the bytes the live
run sent and the bytes a fold rebuilds cannot drift apart.
"""

from __future__ import annotations

from runfold.core.canonical import encode_json
from runfold.core.messages import ToolResultBlock, ToolUseBlock
from runfold.core.messages import tool_result_block as _result_block
from runfold.core.messages import tool_use_block as _use_block
from runfold.core.payloads import ToolCalled, ToolResult


def tool_result_block(payload: ToolResult) -> ToolResultBlock:
    """`{kind: tool_result, tool_use_id, content, is_error}` for a `tool_result` payload.

    `content` is `encode_json` of `payload.error` when present (then `is_error` is True), else of
    `payload.result` (an absent result prints as `{}`): keys sorted, no spaces, raw UTF-8.
    """
    if payload.error is not None:
        return _result_block(payload.tool_use_id, encode_json(payload.error).decode("utf-8"), True)
    result = payload.result if payload.result is not None else {}
    return _result_block(payload.tool_use_id, encode_json(result).decode("utf-8"), False)


def gate_rule(payload: ToolResult) -> str | None:
    """The `gate.rule` of a `tool_result` payload's error (a refusal by a rule), else None."""
    gate = payload.error.get("gate") if payload.error is not None else None
    rule = gate.get("rule") if isinstance(gate, dict) else None
    return rule if isinstance(rule, str) else None


def tool_use_block_of(call: ToolCalled) -> ToolUseBlock:
    """`{kind: tool_use, id, name, input}` for a `tool_called` payload.

    `input` is the arguments' JSON text: `call.args` itself when it is a string (the model's
    original text, kept verbatim), else `encode_json(call.args)`.
    """
    args = call.args
    text = args if isinstance(args, str) else encode_json(args).decode("utf-8")
    return _use_block(call.id, call.name, text)
