"""The OpenAI Responses grammar: what `POST /v1/responses` accepts as its `input` item list.

Calls are `function_call` items answered by `function_call_output` items with the same
`call_id`; each reasoning item must be immediately followed by the item it produced, never by
another reasoning item (DESIGN.md §8; the rule and its sources at `reasoning_at`).
Violations carry the `input[i]` item index. Keeping a wave's outputs together right after its
calls is runfold's own demand (its conversation always renders waves whole).
"""

from __future__ import annotations

from typing import Any

from runfold.core.validate.rules import (
    OPENAI_RESPONSES,
    Call,
    Report,
    Result,
    Violation,
    body_object,
    check_pairing,
    entries_of,
    is_blank,
    type_name,
)

ROLES = ("user", "assistant", "system", "developer")
CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
SERVER_CALL_TYPES = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "computer_call",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)
OTHER_TYPES = frozenset(
    {
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "mcp_approval_response",
        "item_reference",
        "compaction",
    }
)
ITEM_TYPES = frozenset({"message", "reasoning"}) | CALL_TYPES | OUTPUT_TYPES | SERVER_CALL_TYPES | OTHER_TYPES
TEXT_PARTS = frozenset({"input_text", "output_text"})
PART_TYPES = TEXT_PARTS | frozenset({"refusal", "input_image", "input_file", "input_audio"})


def item_type(item: Any) -> str | None:
    """An input item's type; an item with a `role` and no `type` is a message (easy input form)."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else None


def _assistant_side(item: Any) -> bool:
    """Items the model produced: reasoning, calls, and assistant messages."""
    kind = item_type(item)
    if kind == "message":
        return bool(item.get("role") == "assistant")
    return kind == "reasoning" or kind in CALL_TYPES or kind in SERVER_CALL_TYPES


def validate(body: Any) -> list[Violation]:
    """Every violation of the Responses grammar in `body` (a parsed request), ordered by input
    item index; an empty list means the body passes. Never raises on malformed input."""
    report = Report(OPENAI_RESPONSES)
    obj = body_object(report, body)
    if obj is None:
        return report.sorted()
    text = obj.get("input")
    if isinstance(text, str):
        if is_blank(text):
            report.add(None, "text-not-empty", "input", "the text input is empty or whitespace only")
        return report.sorted()
    items = entries_of(
        report,
        obj,
        "input",
        "a string or an array of items",
        "`input` is an empty array; send at least one item",
    )
    if items is None:
        return report.sorted()

    for i, item in enumerate(items):
        _check_item(report, i, f"input[{i}]", item)

    calls = [call for at in calls_from(items, 0) for call in at]
    results: list[Result] = []
    for k in range(len(items)):
        results.extend(results_at(items, k))
    check_pairing(report, calls, results, call_word="function_call", result_word="function_call_output")
    _check_reasoning(report, items)
    return report.sorted()


def calls_at(items: list[Any], k: int) -> list[Call]:
    """The call item k is, if any; its answer zone is the run of output items right after the
    run of assistant-side items holding it (so it depends on the items up to that zone's end)."""
    return calls_from(items, k)[0] if k < len(items) else []


def calls_from(items: list[Any], start: int) -> list[list[Call]]:
    """`calls_at(items, k)` for every k from `start` to the end, in one backward pass: linear in
    the items, however many calls a run of assistant-side items holds (each zone is a `range`)."""
    n = len(items)
    size = n - start
    output_end = [n] * (size + 1)  # per index: the end of the run of output items starting there
    side_end = [n] * (size + 1)  # per index: the first index after it that is not assistant-side
    out: list[list[Call]] = [[] for _ in range(size)]
    for j in range(n - 1, start - 1, -1):
        at = j - start
        item = items[j]
        kind = item_type(item)
        output_end[at] = output_end[at + 1] if kind in OUTPUT_TYPES else j
        if j + 1 < n:
            side_end[at] = side_end[at + 1] if _assistant_side(items[j + 1]) else j + 1
        if kind in CALL_TYPES and isinstance(item.get("call_id"), str):
            first = side_end[at]
            out[at] = [Call(item["call_id"], j, f"input[{j}]", range(first, output_end[first - start]))]
    return out


def results_at(items: list[Any], k: int) -> list[Result]:
    """The output item k is, if any."""
    item = items[k]
    if item_type(item) in OUTPUT_TYPES and isinstance(item.get("call_id"), str):
        return [Result(item["call_id"], k, f"input[{k}]")]
    return []


def _check_item(report: Report, i: int, path: str, item: Any) -> None:
    if not isinstance(item, dict):
        report.add(i, "content-shape", path, f"input item {i} is a JSON {type_name(item)}, not an object")
        return
    kind = item_type(item)
    if kind not in ITEM_TYPES:
        report.add(i, "content-shape", f"{path}.type", f"unknown input item type {item.get('type')!r}")
        return
    if kind == "message":
        _check_message(report, i, path, item)
    elif kind in CALL_TYPES:
        payload = "arguments" if kind == "function_call" else "input"
        for key in ("call_id", "name"):
            if not isinstance(item.get(key), str) or not item.get(key):
                report.add(
                    i, "content-shape", f"{path}.{key}", f"a {kind} item needs a non-empty string `{key}`"
                )
        if not isinstance(item.get(payload), str):
            report.add(
                i,
                "content-shape",
                f"{path}.{payload}",
                f"`{payload}` must be the call's JSON text (a string), not {type_name(item.get(payload))}",
            )
    elif kind in OUTPUT_TYPES:
        if not isinstance(item.get("call_id"), str) or not item.get("call_id"):
            report.add(i, "content-shape", f"{path}.call_id", f"a {kind} item needs a string `call_id`")
        if not isinstance(item.get("output"), str | list):
            report.add(
                i,
                "content-shape",
                f"{path}.output",
                f"`output` must be a string or an array of content parts, not {type_name(item.get('output'))}",
            )
    elif kind == "reasoning":
        if not isinstance(item.get("summary"), list):
            report.add(
                i,
                "content-shape",
                f"{path}.summary",
                "a reasoning item needs a `summary` array ([] when empty)",
            )


def _check_message(report: Report, i: int, path: str, item: dict[str, Any]) -> None:
    role = item.get("role")
    if role not in ROLES:
        report.add(i, "role-valid", f"{path}.role", f"role {role!r} is not one of {', '.join(ROLES)}")
    if "tool_calls" in item:
        report.add(
            i,
            "assistant-tool-form",
            f"{path}.tool_calls",
            "Responses carries tool calls as separate `function_call` items, not a `tool_calls` field",
        )
    content = item.get("content")
    cpath = f"{path}.content"
    if isinstance(content, str):
        if is_blank(content):
            what = "empty" if content == "" else "whitespace only"
            report.add(i, "text-not-empty", cpath, f"the message's content is {what}")
        return
    if not isinstance(content, list):
        report.add(
            i,
            "content-shape",
            cpath,
            f"`content` must be a string or an array of parts, not {type_name(content)}",
        )
        return
    if not content:
        report.add(i, "content-not-empty", cpath, "the message's content array is empty")
        return
    for j, part in enumerate(content):
        ppath = f"{cpath}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in PART_TYPES:
            if kind in ("function_call", "tool_use", "tool_call"):
                report.add(
                    i,
                    "assistant-tool-form",
                    ppath,
                    f"a {kind!r} content part: calls are `function_call` items",
                )
            else:
                report.add(i, "content-shape", ppath, f"unknown content part type {kind!r}")
            continue
        if kind in TEXT_PARTS:
            text = part.get("text")
            if not isinstance(text, str):
                report.add(i, "content-shape", f"{ppath}.text", f"an {kind} part needs a string `text`")
            elif is_blank(text):
                report.add(
                    i, "text-not-empty", f"{ppath}.text", f"the {kind} part is empty or whitespace only"
                )


def _check_reasoning(report: Report, items: list[Any]) -> None:
    """Each reasoning item must be immediately followed by the assistant-side item it produced: a
    call or an assistant message, never another reasoning item (see `reasoning_at`)."""
    for i in range(len(items)):
        reasoning_at(report, items, i)


def reasoning_at(report: Report, items: list[Any], i: int) -> None:
    """The `reasoning-adjacent` check of item i (it reads item i + 1).

    The rule is the API's: a reasoning item sent as input needs its *required following item*
    right after it, and another reasoning item is not one. The API refuses such input with 400
    "Item 'rs_…' of type 'reasoning' was provided without its required following item." — also
    for two reasoning items in a row, which the API itself sometimes returns in one output:
    replaying them as they came is refused, and clients drop the leading unpaired ones (reported
    in https://github.com/openai/codex/issues/1235, worked around in
    https://github.com/UKGovernmentBEIS/inspect_ai/pull/1990 by not playing back leading
    consecutive reasoning items). runfold's renderer sends only the last reasoning item of such a
    run, directly before the item that followed it (`core.render.openai_responses`)."""
    item = items[i]
    if item_type(item) != "reasoning":
        return
    nxt = items[i + 1] if i + 1 < len(items) else None
    if nxt is not None and item_type(nxt) != "reasoning" and _assistant_side(nxt):
        return
    rid = item.get("id")
    label = f"reasoning item {rid!r}" if isinstance(rid, str) else "the reasoning item"
    what = "ends the input" if nxt is None else f"is followed by a {item_type(nxt) or 'malformed'} item"
    if nxt is not None and item_type(nxt) == "message":
        what = f"is followed by a {nxt.get('role')} message"
    instead = (
        "send only the last reasoning item of a run, directly before the call or message it produced"
        if nxt is not None and item_type(nxt) == "reasoning"
        else "keep it directly before the call or message it produced"
    )
    report.add(i, "reasoning-adjacent", f"input[{i}]", f"{label} {what}; {instead}")
