"""Server-sent event framing in the exact form each provider streams.

Anthropic and OpenAI Responses name every event (`event:` line then `data:`); OpenAI Chat sends
bare `data:` lines and ends with `data: [DONE]`. The data is compact JSON on one line.
"""

from __future__ import annotations

import json
from typing import Any


def dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept raw (what the providers send)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def named(event: str, data: Any) -> bytes:
    """`event: <name>\\ndata: <json>\\n\\n` (Anthropic, OpenAI Responses)."""
    return f"event: {event}\ndata: {dumps(data)}\n\n".encode()


def unnamed(data: Any) -> bytes:
    """`data: <json>\\n\\n` (OpenAI Chat Completions chunks)."""
    return f"data: {dumps(data)}\n\n".encode()


DONE = b"data: [DONE]\n\n"
"""The terminator of an OpenAI Chat Completions stream."""


def pieces(text: str, size: int) -> list[str]:
    """`text` cut into deltas of at most `size` code points (at least one piece, maybe empty)."""
    if not text:
        return []
    return [text[i : i + size] for i in range(0, len(text), size)]
