"""Renderers: the internal conversation as each provider dialect's request body (DESIGN.md §8).

`render(dialect, spec)` is a pure function of a `RequestSpec`; `request_bytes(body)` gives the
exact bytes sent and hashed into `model_called.request`, so replay rebuilds the same hash.
`parse_reply` is the inverse for non-streaming replies: a provider response as internal blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runfold.core.errors import invalid_args
from runfold.core.messages import Block
from runfold.core.render import anthropic, openai_chat, openai_responses
from runfold.core.render.spec import (
    ANTHROPIC,
    DIALECTS,
    MAX_BREAKPOINTS,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    TAIL,
    TOOLS,
    Rendered,
    RequestSpec,
    SystemSegment,
    ToolSpec,
    check_dialect,
    request_bytes,
    tools_bytes,
)

__all__ = [
    "ANTHROPIC",
    "DIALECTS",
    "MAX_BREAKPOINTS",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "TAIL",
    "TOOLS",
    "Rendered",
    "RequestSpec",
    "SystemSegment",
    "ToolSpec",
    "parse_reply",
    "render",
    "render_request",
    "request_bytes",
    "tools_bytes",
]

_RENDERERS: dict[str, Callable[[RequestSpec], Rendered]] = {
    ANTHROPIC: anthropic.render,
    OPENAI_CHAT: openai_chat.render,
    OPENAI_RESPONSES: openai_responses.render,
}
_PARSERS: dict[str, Callable[[Mapping[str, Any]], list[Block]]] = {
    ANTHROPIC: anthropic.parse_reply,
    OPENAI_CHAT: openai_chat.parse_reply,
    OPENAI_RESPONSES: openai_responses.parse_reply,
}


def render_request(dialect: str, spec: RequestSpec) -> Rendered:
    """The request body for `dialect` (one of DIALECTS) and the cache breakpoints placed.

    Deterministic: equal specs give bodies whose `request_bytes` are equal. Raises
    `E_INVALID_ARGS` for an unknown dialect, a malformed message or block (naming
    `messages[i].content[j]`), or an image whose data is missing from `spec.images`.
    """
    return _RENDERERS[check_dialect(dialect)](spec)


def render(dialect: str, spec: RequestSpec) -> dict[str, Any]:
    """The request body for `dialect`; see `render_request` (which also reports breakpoints)."""
    return render_request(dialect, spec).body


def parse_reply(dialect: str, response: Mapping[str, Any]) -> list[Block]:
    """The content blocks of a non-streaming reply of `dialect`, as `model_returned.message`
    stores them (DESIGN.md §8).

    Tool calls become `tool_use` blocks whose `input` is the arguments' JSON text (verbatim for
    the OpenAI dialects; Anthropic sends an object, which is written as compact orjson in its
    key order). Thinking and reasoning keep their signature / encrypted content and record the
    `dialect` and `model` that produced them. Raises `E_INVALID_ARGS` naming the response field
    when the response does not have the dialect's shape.
    """
    if not isinstance(response, Mapping):
        raise invalid_args("read reply", "response", "pass the provider's JSON response object")
    return _PARSERS[check_dialect(dialect)](response)
