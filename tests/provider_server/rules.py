"""Request checks of the provider test servers: refuse what the real APIs refuse, in their words.

Each checker walks one dialect's request body in order and returns the first `Rejection` (the
provider's message and, for OpenAI, its `param`), or None. They cover the schema checks the real
APIs make (required fields, types, roles, unknown parameters) and the conversation grammar
(tool calls answered, results preceded by their calls, results first, non-empty text, thinking
first and unmodified). `runfold_violations` adds runfold's own validator, so the servers are
at least as strict as the gate every runfold request passes (DESIGN.md §8).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ANTHROPIC = "anthropic"
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
DIALECTS = (ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES)


@dataclass(frozen=True)
class Rejection:
    """Why a request is refused: the provider's message (Anthropic messages start with the
    field path, e.g. `messages.3: ...`), OpenAI's `param` and `code`, and the rule's name."""

    message: str
    param: str | None = None
    code: str | None = None
    rule: str = ""


def _sdk_keys(module: str, cls: str) -> set[str]:
    try:
        mod = __import__(module, fromlist=[cls])
        return set(getattr(mod, cls).__annotations__)
    except (ImportError, AttributeError):
        return set()


ANTHROPIC_KEYS = {
    "model", "messages", "max_tokens", "system", "tools", "tool_choice", "stream", "temperature", "top_k",
    "top_p", "stop_sequences", "metadata", "thinking", "service_tier", "container", "mcp_servers",
    "context_management",
} | _sdk_keys("anthropic.types.message_create_params", "MessageCreateParamsBase")  # fmt: skip
CHAT_KEYS = {
    "model", "messages", "stream", "stream_options", "tools", "tool_choice", "temperature", "top_p",
    "max_tokens", "max_completion_tokens", "parallel_tool_calls", "prompt_cache_key", "user", "n", "stop",
    "seed", "response_format", "reasoning_effort", "metadata", "store", "logprobs", "top_logprobs",
} | _sdk_keys("openai.types.chat.completion_create_params", "CompletionCreateParamsBase")  # fmt: skip
RESPONSES_KEYS = {
    "model", "input", "instructions", "stream", "stream_options", "tools", "tool_choice", "temperature",
    "top_p", "max_output_tokens", "parallel_tool_calls", "previous_response_id", "prompt_cache_key",
    "reasoning", "include", "store", "text", "truncation", "metadata", "user", "service_tier",
} | _sdk_keys("openai.types.responses.response_create_params", "ResponseCreateParamsBase")  # fmt: skip

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _blank(s: str) -> bool:
    return s.strip() == ""


# Anthropic Messages -------------------------------------------------------------------------

USER_BLOCKS = {"text", "image", "document", "tool_result", "search_result"}
ASSISTANT_BLOCKS = {
    "text",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "server_tool_use",
    "web_search_tool_result",
}


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _a(path: str, msg: str, rule: str) -> Rejection:
    return Rejection(f"{path}: {msg}", rule=rule)


def check_anthropic(body: Any, signatures: Mapping[str, str] | None = None) -> Rejection | None:
    """The first thing Anthropic's `POST /v1/messages` would refuse in `body`, or None.

    `signatures` maps each thinking signature this server issued to its thinking text: a block
    carrying a known signature with changed text is refused as Anthropic refuses an edited
    thinking block (the real API verifies the signature; unknown signatures pass here)."""
    signatures = signatures or {}
    if not isinstance(body, dict):
        return Rejection("Input should be a valid dictionary", rule="body-shape")
    for key in body:
        if key not in ANTHROPIC_KEYS:
            return _a(key, "Extra inputs are not permitted", "body-shape")
    for key in ("model", "messages", "max_tokens"):
        if key not in body:
            return _a(key, "Field required", "body-shape")
    if not isinstance(body["model"], str) or not body["model"]:
        return _a("model", "Input should be a valid string", "body-shape")
    mt = body["max_tokens"]
    if isinstance(mt, bool) or not isinstance(mt, int):
        return _a("max_tokens", "Input should be a valid integer", "body-shape")
    if mt < 1:
        return _a("max_tokens", "Input should be greater than or equal to 1", "body-shape")
    if "stream" in body and not isinstance(body["stream"], bool):
        return _a("stream", "Input should be a valid boolean", "body-shape")
    rej = _check_anthropic_tools(body) or _check_anthropic_system(body)
    if rej:
        return rej
    messages = body["messages"]
    if not isinstance(messages, list):
        return _a("messages", "Input should be a valid list", "body-shape")
    if not messages:
        return _a("messages", "at least one message is required", "body-shape")
    cached = _count_cache_control(body)
    if cached > 4:
        return Rejection(
            f"A maximum of 4 blocks with cache_control may be provided. Found {cached}.", rule="cache-control"
        )
    seen_ids: set[str] = set()
    for i, msg in enumerate(messages):
        rej = _check_anthropic_message(messages, i, msg, seen_ids, signatures)
        if rej:
            return rej
    return _check_anthropic_thinking(body, messages)


def _check_anthropic_tools(body: dict[str, Any]) -> Rejection | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        return _a("tools", "Input should be a valid list", "body-shape")
    names: set[str] = set()
    for t, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return _a(f"tools.{t}", "Input should be a valid dictionary", "body-shape")
        name = tool.get("name")
        if name is None:
            return _a(f"tools.{t}.name", "Field required", "body-shape")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            return _a(f"tools.{t}.name", "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", "tool-name")
        if "type" not in tool or tool.get("type") == "custom":
            schema = tool.get("input_schema")
            if schema is None:
                return _a(f"tools.{t}.custom.input_schema", "Field required", "body-shape")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                return _a(f"tools.{t}.custom.input_schema.type", "Input should be 'object'", "body-shape")
        if name in names:
            return Rejection("tools: Tool names must be unique.", rule="tool-name")
        names.add(name)
    return None


def _check_anthropic_system(body: dict[str, Any]) -> Rejection | None:
    system = body.get("system")
    if system is None or isinstance(system, str):
        return None
    if not isinstance(system, list):
        return _a("system", "Input should be a valid list", "body-shape")
    for s, block in enumerate(system):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            return _a(f"system.{s}", "Input should be a valid text block", "body-shape")
        if _blank(block["text"]):
            return _a(
                f"system.{s}.text", "text content blocks must contain non-whitespace text", "text-not-empty"
            )
    return None


def _count_cache_control(body: dict[str, Any]) -> int:
    n = 0
    groups: list[Any] = []
    if isinstance(body.get("system"), list):
        groups.append(body["system"])
    if isinstance(body.get("tools"), list):
        groups.append(body["tools"])
    for msg in body.get("messages") or []:
        if isinstance(msg, dict) and isinstance(msg.get("content"), list):
            groups.append(msg["content"])
    for group in groups:
        n += sum(1 for b in group if isinstance(b, dict) and b.get("cache_control") is not None)
    return n


def _tool_use_ids(msg: Any) -> list[str]:
    if (
        not isinstance(msg, dict)
        or msg.get("role") != "assistant"
        or not isinstance(msg.get("content"), list)
    ):
        return []
    return [
        b["id"]
        for b in msg["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)
    ]


def _check_anthropic_message(
    messages: list[Any], i: int, msg: Any, seen_ids: set[str], signatures: Mapping[str, str]
) -> Rejection | None:
    path = f"messages.{i}"
    if not isinstance(msg, dict):
        return _a(path, "Input should be a valid dictionary", "content-shape")
    for key in msg:
        if key not in ("role", "content"):
            return _a(f"{path}.{key}", "Extra inputs are not permitted", "content-shape")
    role = msg.get("role")
    if role is None:
        return _a(f"{path}.role", "Field required", "role-valid")
    if role not in ("user", "assistant"):
        return _a(f"{path}.role", "Input should be 'user' or 'assistant'", "role-valid")
    if "content" not in msg:
        return _a(f"{path}.content", "Field required", "content-shape")
    content = msg["content"]
    if not isinstance(content, str | list):
        return _a(f"{path}.content", "Input should be a valid string or a valid list", "content-shape")
    if i == 0 and role != "user":
        return Rejection('messages: first message must use the "user" role', rule="first-message-user")
    if i > 0 and isinstance(messages[i - 1], dict) and messages[i - 1].get("role") == role:
        return Rejection(
            f'messages: roles must alternate between "user" and "assistant", but found multiple "{role}" roles in a row',
            rule="roles-alternate",
        )
    final_assistant = role == "assistant" and i == len(messages) - 1
    if content == [] or content == "":
        if not final_assistant:
            return _a(
                path,
                "all messages must have non-empty content except for the optional final assistant message",
                "content-not-empty",
            )
    blocks = _blocks(content)
    allowed = USER_BLOCKS if role == "user" else ASSISTANT_BLOCKS
    previous_calls = set(_tool_use_ids(messages[i - 1])) if i > 0 else set()
    for k, block in enumerate(blocks):
        bpath = f"{path}.content.{k}"
        if not isinstance(block, dict):
            return _a(bpath, "Input should be a valid dictionary", "content-shape")
        kind = block.get("type")
        if kind is None:
            return _a(f"{bpath}.type", "Field required", "content-shape")
        if kind not in allowed:
            if kind in USER_BLOCKS | ASSISTANT_BLOCKS:
                return _a(bpath, f"`{kind}` blocks are not permitted in `{role}` messages", "content-shape")
            return _a(
                bpath,
                f"Input tag '{kind}' found using 'type' does not match any of the expected tags",
                "content-shape",
            )
        rej = _check_anthropic_block(bpath, block, kind, seen_ids, previous_calls, signatures)
        if rej:
            return rej
    calls = _tool_use_ids(msg)
    if calls:
        return _check_anthropic_wave(messages, i, calls)
    return None


def _check_anthropic_block(
    bpath: str,
    block: dict[str, Any],
    kind: str,
    seen_ids: set[str],
    previous_calls: set[str],
    signatures: Mapping[str, str],
) -> Rejection | None:
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            return _a(
                f"{bpath}.text",
                "Field required" if text is None else "Input should be a valid string",
                "content-shape",
            )
        if _blank(text):
            return _a(
                f"{bpath}.text", "text content blocks must contain non-whitespace text", "text-not-empty"
            )
    elif kind == "tool_use":
        for key in ("id", "name", "input"):
            if key not in block:
                return _a(f"{bpath}.{key}", "Field required", "content-shape")
        if not isinstance(block["id"], str) or not TOOL_USE_ID.match(block["id"]):
            return _a(f"{bpath}.id", "String should match pattern '^[a-zA-Z0-9_-]+$'", "content-shape")
        if not isinstance(block["input"], dict):
            return _a(f"{bpath}.input", "Input should be a valid dictionary", "content-shape")
        if block["id"] in seen_ids:
            return _a(bpath, "`tool_use` ids must be unique", "call-id-unique")
        seen_ids.add(block["id"])
    elif kind == "tool_result":
        tid = block.get("tool_use_id")
        if tid is None:
            return _a(f"{bpath}.tool_use_id", "Field required", "content-shape")
        if tid not in previous_calls:
            return _a(
                bpath,
                f"unexpected `tool_use_id` found in `tool_result` blocks: {tid}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message.",
                "result-has-call",
            )
        inner = block.get("content")
        if inner is not None and not isinstance(inner, str):
            if not isinstance(inner, list):
                return _a(
                    f"{bpath}.content", "Input should be a valid string or a valid list", "content-shape"
                )
            for c, sub in enumerate(inner):
                if (
                    isinstance(sub, dict)
                    and sub.get("type") == "text"
                    and isinstance(sub.get("text"), str)
                    and _blank(sub["text"])
                ):
                    return _a(
                        f"{bpath}.content.{c}.text",
                        "text content blocks must contain non-whitespace text",
                        "text-not-empty",
                    )
    elif kind == "thinking":
        for key in ("thinking", "signature"):
            if not isinstance(block.get(key), str):
                return _a(f"{bpath}.{key}", "Field required", "content-shape")
        sig = block["signature"]
        if sig == "" or (sig in signatures and signatures[sig] != block["thinking"]):
            return _a(bpath, "Invalid `signature` in `thinking` block", "thinking-unmodified")
    elif kind == "redacted_thinking":
        if not isinstance(block.get("data"), str):
            return _a(f"{bpath}.data", "Field required", "content-shape")
    return None


def _check_anthropic_wave(messages: list[Any], i: int, calls: list[str]) -> Rejection | None:
    nxt = messages[i + 1] if i + 1 < len(messages) else None
    answered: list[str] = []
    leading = True
    late = False
    if isinstance(nxt, dict) and nxt.get("role") == "user" and isinstance(nxt.get("content"), list):
        for b in nxt["content"]:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                answered.append(str(b.get("tool_use_id")))
                late = late or not leading
            else:
                leading = False
    if nxt is None:
        return None  # a final assistant message (prefill) is the model's to continue
    missing = [c for c in calls if c not in answered]
    if missing:
        return _a(
            f"messages.{i}",
            f"`tool_use` ids were found without `tool_result` blocks immediately after: {', '.join(missing)}. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            "call-answered",
        )
    if late:
        return _a(
            f"messages.{i + 1}",
            "Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks.",
            "results-first",
        )
    return None


def _check_anthropic_thinking(body: dict[str, Any], messages: list[Any]) -> Rejection | None:
    cfg = body.get("thinking")
    if not (isinstance(cfg, dict) and cfg.get("type") in ("enabled", "adaptive")):
        return None

    def only_results(m: Any) -> bool:
        c = m.get("content") if isinstance(m, dict) else None
        return (
            isinstance(c, list)
            and bool(c)
            and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in c)
        )

    def starts_with_results(m: Any) -> bool:
        c = m.get("content") if isinstance(m, dict) else None
        return (
            isinstance(c, list) and bool(c) and isinstance(c[0], dict) and c[0].get("type") == "tool_result"
        )

    j = len(messages) - 1
    if not (messages[j].get("role") == "user" and starts_with_results(messages[j])):
        return None
    opener = j - 1
    while opener - 2 >= 0 and only_results(messages[opener - 1]) and _tool_use_ids(messages[opener - 2]):
        opener -= 2
    content = messages[opener].get("content")
    first = content[0] if isinstance(content, list) and content else None
    kind = first.get("type") if isinstance(first, dict) else "text"
    if kind in ("thinking", "redacted_thinking"):
        return None
    return _a(
        f"messages.{opener}.content.0.type",
        f"Expected `thinking` or `redacted_thinking`, but found `{kind}`. When `thinking` is enabled, a final "
        "`assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and "
        "`tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this "
        "requirement, disable `thinking`.",
        "thinking-first",
    )


# OpenAI Chat Completions --------------------------------------------------------------------

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _missing(param: str) -> Rejection:
    return Rejection(
        f"Missing required parameter: '{param}'.",
        param=param,
        code="missing_required_parameter",
        rule="body-shape",
    )


def check_openai_chat(body: Any) -> Rejection | None:
    """The first thing OpenAI's `POST /v1/chat/completions` would refuse in `body`, or None."""
    if not isinstance(body, dict):
        return Rejection("Invalid type for body: expected an object.", rule="body-shape")
    for key in body:
        if key not in CHAT_KEYS:
            return Rejection(f"Unrecognized request argument supplied: {key}", rule="body-shape")
    if not body.get("model"):
        return Rejection("you must provide a model parameter", rule="body-shape")
    if "messages" not in body:
        return _missing("messages")
    messages = body["messages"]
    if not isinstance(messages, list):
        return Rejection(
            "Invalid type for 'messages': expected an array.",
            param="messages",
            code="invalid_type",
            rule="body-shape",
        )
    if not messages:
        return Rejection(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            param="messages",
            code="empty_array",
            rule="body-shape",
        )
    if "stream_options" in body and body.get("stream") is not True:
        return Rejection(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            rule="body-shape",
        )
    rej = _check_chat_tools(body)
    if rej:
        return rej
    pending: list[str] = []  # calls of the last assistant message not yet answered
    pending_at = -1
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            return Rejection(
                f"Invalid type for 'messages[{i}]': expected an object.",
                param=f"messages[{i}]",
                code="invalid_type",
                rule="content-shape",
            )
        role = msg.get("role")
        if role is None:
            return _missing(f"messages[{i}].role")
        if role not in CHAT_ROLES:
            return Rejection(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
                param=f"messages[{i}].role",
                code="invalid_value",
                rule="role-valid",
            )
        if role == "tool":
            tid = msg.get("tool_call_id")
            if tid is None:
                return Rejection(
                    "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.",
                    param=f"messages.[{i}].tool_call_id",
                    rule="content-shape",
                )
            if tid not in pending:
                return Rejection(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                    rule="result-has-call",
                )
            pending.remove(tid)
            rej = _check_chat_content(i, msg, role)
            if rej:
                return rej
            continue
        if pending:
            return _unanswered(pending_at, pending)
        rej = _check_chat_content(i, msg, role)
        if rej:
            return rej
        if role == "assistant":
            calls = msg.get("tool_calls")
            if calls is not None:
                rej, ids = _check_chat_calls(i, calls)
                if rej:
                    return rej
                pending, pending_at = ids, i
    if pending:
        return _unanswered(pending_at, pending)
    return None


def _unanswered(i: int, ids: list[str]) -> Rejection:
    return Rejection(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
        f"The following tool_call_ids did not have response messages: {', '.join(ids)}",
        param=f"messages.[{i}].role",
        rule="call-answered",
    )


def _check_chat_tools(body: dict[str, Any]) -> Rejection | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        return Rejection(
            "Invalid type for 'tools': expected an array.",
            param="tools",
            code="invalid_type",
            rule="body-shape",
        )
    for t, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            return Rejection(
                f"Invalid value for 'tools[{t}].type'.",
                param=f"tools[{t}].type",
                code="invalid_value",
                rule="body-shape",
            )
        fn = tool.get("function")
        if not isinstance(fn, dict) or "name" not in fn:
            return _missing(f"tools[{t}].function.name")
        if not isinstance(fn["name"], str) or not TOOL_NAME.match(fn["name"]):
            return Rejection(
                f"Invalid 'tools[{t}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                param=f"tools[{t}].function.name",
                code="invalid_value",
                rule="tool-name",
            )
    return None


def _check_chat_content(i: int, msg: dict[str, Any], role: str) -> Rejection | None:
    content = msg.get("content")
    if content is None:
        if role == "assistant" and msg.get("tool_calls"):
            return None
        if role == "assistant":
            return Rejection(
                "Invalid value for 'content': expected a string, got null.",
                param=f"messages.[{i}].content",
                rule="content-not-empty",
            )
        return _missing(f"messages[{i}].content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return Rejection(
            f"Invalid type for 'messages[{i}].content': expected one of a string or array of objects.",
            param=f"messages[{i}].content",
            code="invalid_type",
            rule="content-shape",
        )
    if not content and role != "assistant":
        return Rejection(
            f"Invalid 'messages[{i}].content': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            param=f"messages[{i}].content",
            code="empty_array",
            rule="content-not-empty",
        )
    allowed = (
        ("text", "refusal")
        if role == "assistant"
        else ("text",)
        if role in ("system", "developer", "tool")
        else ("text", "image_url", "input_audio", "file")
    )
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            shown = ", ".join(f"'{a}'" for a in allowed)
            return Rejection(
                f"Invalid value: '{kind}'. Supported values are: {shown}.",
                param=f"messages[{i}].content[{k}].type",
                code="invalid_value",
                rule="content-shape",
            )
        if kind == "text" and not isinstance(part.get("text"), str):
            return _missing(f"messages[{i}].content[{k}].text")
    return None


def _check_chat_calls(i: int, calls: Any) -> tuple[Rejection | None, list[str]]:
    if not isinstance(calls, list):
        return Rejection(
            f"Invalid type for 'messages[{i}].tool_calls': expected an array.",
            param=f"messages[{i}].tool_calls",
            code="invalid_type",
            rule="content-shape",
        ), []
    if not calls:
        return Rejection(
            f"Invalid 'messages[{i}].tool_calls': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            param=f"messages[{i}].tool_calls",
            code="empty_array",
            rule="content-shape",
        ), []
    ids: list[str] = []
    for k, call in enumerate(calls):
        where = f"messages[{i}].tool_calls[{k}]"
        if not isinstance(call, dict):
            return Rejection(
                f"Invalid type for '{where}': expected an object.",
                param=where,
                code="invalid_type",
                rule="content-shape",
            ), []
        for key in ("id", "type", "function"):
            if key not in call:
                return _missing(f"{where}.{key}"), []
        fn = call["function"]
        if not isinstance(fn, dict) or "name" not in fn or "arguments" not in fn:
            return _missing(
                f"{where}.function.{'name' if not isinstance(fn, dict) or 'name' not in fn else 'arguments'}"
            ), []
        if not isinstance(fn["arguments"], str):
            return Rejection(
                f"Invalid type for '{where}.function.arguments': expected a string.",
                param=f"{where}.function.arguments",
                code="invalid_type",
                rule="content-shape",
            ), []
        if call["id"] in ids:
            return Rejection(
                f"Duplicate value for 'tool_call_id' of {call['id']} in message[{i}]. Please ensure all tool call ids are unique.",
                param=f"messages.[{i}].tool_calls",
                rule="call-id-unique",
            ), []
        ids.append(call["id"])
    return None, ids


# OpenAI Responses ---------------------------------------------------------------------------

ITEM_ID_PREFIX = {"function_call": "fc", "reasoning": "rs", "message": "msg"}


def check_openai_responses(body: Any) -> Rejection | None:
    """The first thing OpenAI's `POST /v1/responses` would refuse in `body`, or None.

    Without `previous_response_id` every `function_call` needs its `function_call_output` and
    every output its call; a `reasoning` item needs the item it belongs to after it, and its
    `encrypted_content` when `store` is false."""
    if not isinstance(body, dict):
        return Rejection("Invalid type for body: expected an object.", rule="body-shape")
    for key in body:
        if key not in RESPONSES_KEYS:
            return Rejection(
                f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter", rule="body-shape"
            )
    if not body.get("model"):
        return _missing("model")
    inp = body.get("input")
    if inp is None or isinstance(inp, str):
        return None
    if not isinstance(inp, list):
        return Rejection(
            "Invalid type for 'input': expected one of a string or array of objects.",
            param="input",
            code="invalid_type",
            rule="body-shape",
        )
    for t, tool in enumerate(body.get("tools") or []):
        if (
            isinstance(tool, dict)
            and tool.get("type") == "function"
            and not isinstance(tool.get("name"), str)
        ):
            return _missing(f"tools[{t}].name")
    chained = body.get("previous_response_id") is not None
    store = body.get("store", True) is not False
    calls: dict[str, int] = {}
    outputs: set[str] = set()
    for i, item in enumerate(inp):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            return Rejection(
                f"Invalid type for '{where}': expected an object.",
                param=where,
                code="invalid_type",
                rule="content-shape",
            )
        kind = item.get("type", "message" if "role" in item else None)
        if kind is None:
            return _missing(f"{where}.type")
        prefix = ITEM_ID_PREFIX.get(kind)
        iid = item.get("id")
        if prefix and iid is not None and not (isinstance(iid, str) and iid.startswith(prefix)):
            return Rejection(
                f"Invalid '{where}.id': '{iid}'. Expected an ID that begins with '{prefix}'.",
                param=f"{where}.id",
                code="invalid_value",
                rule="content-shape",
            )
        if kind == "message":
            rej = _check_responses_message(where, item)
        elif kind == "function_call":
            rej = None
            for key in ("call_id", "name", "arguments"):
                if not isinstance(item.get(key), str):
                    rej = rej or _missing(f"{where}.{key}")
            if rej is None:
                calls[item["call_id"]] = i
        elif kind == "function_call_output":
            cid = item.get("call_id")
            rej = _missing(f"{where}.call_id") if not isinstance(cid, str) else None
            if "output" not in item:
                rej = rej or _missing(f"{where}.output")
            if rej is None and cid not in calls and not chained:
                rej = Rejection(
                    f"No tool call found for function call output with call_id {cid}.",
                    param="input",
                    rule="result-has-call",
                )
            if isinstance(cid, str):
                outputs.add(cid)
        elif kind == "reasoning":
            rej = None
            if "summary" not in item:
                rej = _missing(f"{where}.summary")
            elif i == len(inp) - 1:
                rej = Rejection(
                    f"Item '{iid}' of type 'reasoning' was provided without its required following item.",
                    param="input",
                    rule="reasoning-grouped",
                )
            elif not store and not item.get("encrypted_content"):
                rej = Rejection(
                    f"Item with id '{iid}' not found. Items are not persisted when `store` is set to false. Try again with "
                    "`store` set to true, or remove this item from your input.",
                    param="input",
                    rule="reasoning-grouped",
                )
        else:
            rej = None
        if rej:
            return rej
    if not chained:
        for cid in calls:
            if cid not in outputs:
                return Rejection(
                    f"No tool output found for function call {cid}.", param="input", rule="call-answered"
                )
    return None


def _check_responses_message(where: str, item: dict[str, Any]) -> Rejection | None:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        return Rejection(
            f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and 'user'.",
            param=f"{where}.role",
            code="invalid_value",
            rule="role-valid",
        )
    content = item.get("content")
    if content is None:
        return _missing(f"{where}.content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return Rejection(
            f"Invalid type for '{where}.content': expected one of a string or array of objects.",
            param=f"{where}.content",
            code="invalid_type",
            rule="content-shape",
        )
    allowed = (
        ("output_text", "refusal") if role == "assistant" else ("input_text", "input_image", "input_file")
    )
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            shown = (
                " and ".join(f"'{a}'" for a in allowed)
                if len(allowed) == 2
                else "'input_text', 'input_image', and 'input_file'"
            )
            return Rejection(
                f"Invalid value: '{kind}'. Supported values are: {shown}.",
                param=f"{where}.content[{k}]",
                code="invalid_value",
                rule="content-shape",
            )
        if kind in ("input_text", "output_text") and not isinstance(part.get("text"), str):
            return _missing(f"{where}.content[{k}].text")
    return None


# runfold's own validator --------------------------------------------------------------------


def runfold_violations(dialect: str, body: Any) -> list[Any]:
    """The violations runfold's validator (`runfold.core.validate.validate(dialect, body)`)
    reports for `body`; an empty list when it has none or is not importable yet."""
    try:
        from runfold.core.validate import validate
    except ImportError:
        return []
    return list(validate(dialect, body))


def first_runfold_rejection(dialect: str, body: Any) -> Rejection | None:
    """The first violation of runfold's validator as a provider rejection (its path and
    message, its rule name), or None."""
    for v in runfold_violations(dialect, body):
        path = str(getattr(v, "path", "") or "")
        message = str(getattr(v, "message", v))
        rule = str(getattr(v, "rule", ""))
        if dialect == ANTHROPIC:
            return Rejection(f"{_dotted(path) or 'messages'}: {message}", rule=rule)
        return Rejection(message, param=path or None, rule=rule)
    return None


def _dotted(path: str) -> str:
    """`messages[2].content[0]` → `messages.2.content.0` (Anthropic's path style)."""
    return re.sub(r"\[(\d+)\]", r".\1", path)


def check(dialect: str, body: Any, signatures: Mapping[str, str] | None = None) -> Rejection | None:
    """The provider's own checks first, then runfold's validator: the first rejection or None."""
    if dialect == ANTHROPIC:
        rej = check_anthropic(body, signatures)
    elif dialect == OPENAI_CHAT:
        rej = check_openai_chat(body)
    else:
        rej = check_openai_responses(body)
    return rej or first_runfold_rejection(dialect, body)
