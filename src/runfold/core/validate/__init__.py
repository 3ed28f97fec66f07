"""The provider-grammar validator: the last step before any request leaves (DESIGN.md §8).

`validate(dialect, body)` returns every violation of a rendered request body — the JSON the
provider receives — for Anthropic Messages, OpenAI Chat Completions or OpenAI Responses, each
with its message (or input item) index and a rule name from `RULE_NAMES`. `ensure_valid` is the
run loop's guard: a request that fails is refused, never sent. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runfold.core.errors import ErrorCode, Retry, RunfoldError, invalid_args
from runfold.core.validate import anthropic, openai_chat, openai_responses
from runfold.core.validate.rules import (
    ANTHROPIC,
    DIALECTS,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    RULE_NAMES,
    RULES,
    RULES_BY_NAME,
    Rule,
    Violation,
)

__all__ = [
    "ANTHROPIC",
    "DIALECTS",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "RULES",
    "RULES_BY_NAME",
    "RULE_NAMES",
    "Rule",
    "Violation",
    "ensure_valid",
    "infer_dialect",
    "refuse_violations",
    "validate",
]

_CHECKERS: Mapping[str, Callable[[Any], list[Violation]]] = {
    ANTHROPIC: anthropic.validate,
    OPENAI_CHAT: openai_chat.validate,
    OPENAI_RESPONSES: openai_responses.validate,
}


def validate(dialect: str, body: Any) -> list[Violation]:
    """Every violation of `dialect`'s grammar in `body` (a parsed request body), ordered by message
    index (body-level faults first); `[]` means the body passes.

    Malformed bodies (not an object, no messages, wrong types) give violations, never exceptions.
    Raises `E_INVALID_ARGS` only when `dialect` is not one of `DIALECTS`.
    """
    checker = _CHECKERS.get(dialect)
    if checker is None:
        raise invalid_args(
            "validate a request",
            f"dialect {dialect!r}",
            "use one of: " + ", ".join(DIALECTS),
            nearby=DIALECTS,
        )
    return checker(body)


_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
_CHAT_ROLES = frozenset({"system", "developer", "tool", "function"})


def infer_dialect(body: Any) -> str:
    """The dialect a request body is written in, from its shape.

    `input` (or `instructions`) without `messages` → `openai-responses`; messages with a
    `system`/`developer`/`tool` role or `tool_calls`, or Chat-style tools (`{"type": "function",
    "function": ...}`) → `openai-chat`; a top-level `system`, `tool_use`/`tool_result`/`thinking`
    blocks, tools with `input_schema`, or `max_tokens` → `anthropic`; anything else (a plain
    chat without any of these marks) → `openai-chat`. Raises `E_INVALID_ARGS` when `body` is not
    an object or holds neither `messages` nor `input`.
    """
    if not isinstance(body, dict):
        raise invalid_args(
            "infer the dialect",
            "the request body",
            "the body must be a JSON object; pass --dialect and a provider request body",
        )
    if "messages" not in body:
        if "input" in body or "instructions" in body:
            return OPENAI_RESPONSES
        raise invalid_args(
            "infer the dialect",
            "the request body",
            "a request body holds `messages` (Anthropic, Chat) or `input` (Responses); check the file",
            nearby=DIALECTS,
        )
    messages = body.get("messages")
    anthropic_marks = "system" in body or "anthropic_version" in body or "thinking" in body
    chat_marks = "max_completion_tokens" in body or "prompt_cache_key" in body
    for msg in messages if isinstance(messages, list) else []:
        if not isinstance(msg, dict):
            continue
        if msg.get("role") in _CHAT_ROLES or "tool_calls" in msg or "tool_call_id" in msg:
            chat_marks = True
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else None
                if kind in _ANTHROPIC_BLOCKS:
                    anthropic_marks = True
                elif kind in ("image_url", "input_audio"):
                    chat_marks = True
    for tool in body.get("tools") or [] if isinstance(body.get("tools"), list) else []:
        if isinstance(tool, dict):
            if "function" in tool:
                chat_marks = True
            elif "input_schema" in tool:
                anthropic_marks = True
    if chat_marks and not anthropic_marks:
        return OPENAI_CHAT
    if anthropic_marks and not chat_marks:
        return ANTHROPIC
    if chat_marks and anthropic_marks:
        # Mixed marks: a top-level `system` is Anthropic-only, a tool role is Chat-only; trust roles.
        return (
            OPENAI_CHAT
            if any(isinstance(m, dict) and m.get("role") in _CHAT_ROLES for m in messages or [])
            else ANTHROPIC
        )
    return ANTHROPIC if "max_tokens" in body else OPENAI_CHAT


def ensure_valid(dialect: str, body: Any) -> None:
    """Refuse a request body that breaks `dialect`'s grammar; return None when it passes.

    A request that fails validation is a runfold bug (the conversation fold and the renderers
    must never produce one): it is refused and never sent (DESIGN.md §8). The error is
    `E_WIRE_MISMATCH` — the bytes about to go on the wire do not match the provider's grammar —
    with `retry: no` (sending the same body again fails the same way), every violation listed in
    `nearby` (one `Violation.display()` line each), and the first one named in the subject.
    Raises `E_INVALID_ARGS` when `dialect` is unknown.
    """
    refuse_violations(dialect, validate(dialect, body))


def refuse_violations(dialect: str, found: list[Violation]) -> None:
    """Raise `ensure_valid`'s `E_WIRE_MISMATCH` for the violations `found` of a `dialect` body
    (return None when `found` is empty); the incremental validator's violations go here too."""
    if not found:
        return
    first = found[0]
    where = "the request" if first.index is None else f"message {first.index}"
    raise RunfoldError(
        code=ErrorCode.WIRE_MISMATCH,
        action=f"send the {dialect} request",
        subject=f"{where} ({first.rule}; {len(found)} violation{'s' if len(found) != 1 else ''} in all)",
        recovery=(
            "the request was not sent; this is a runfold bug — report it with the violations listed "
            "in `nearby` (or `runfold validate` on the body), then fork the run before the bad turn"
        ),
        nearby=tuple(v.display() for v in found),
        retry=Retry.NO,
    )
