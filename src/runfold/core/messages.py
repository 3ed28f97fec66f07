"""The internal message model every provider dialect is rendered from (DESIGN.md §8).

A message is `{"role": "user"|"assistant", "content": [block, ...]}`; a block is a JSON object
tagged by the key `kind`. This is exactly what `model_returned.message` stores, so messages stay
plain JSON (float-free, canonical) rather than classes.

Block kinds and their keys (`?` optional):
- `text`: `text` str
- `thinking`: `thinking` str, `signature` str, `dialect?` str (the dialect that produced it:
  `anthropic` or `openai-responses`), `id?` str (a Responses reasoning item id),
  `model?` str (the model that produced it; thinking of another model is omitted, never edited)
- `redacted_thinking`: `data` str, `dialect?`, `model?`
- `tool_use`: `id` str, `name` str, `input` str (the arguments' original JSON text, kept verbatim
  so floats and number spellings survive byte-exact)
- `tool_result`: `tool_use_id` str, `content` str, `is_error` bool
- `image`: `locator` str (a CAS locator), `media_type` str
"""

from __future__ import annotations

from typing import Any, Literal

from runfold.core.errors import invalid_args

Role = Literal["user", "assistant"]
Block = dict[str, Any]
Message = dict[str, Any]

BLOCK_KINDS: frozenset[str] = frozenset(
    {"text", "thinking", "redacted_thinking", "tool_use", "tool_result", "image"}
)
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",),
    "tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id", "content", "is_error"),
    "image": ("locator", "media_type"),
}


def text_block(text: str) -> Block:
    return {"kind": "text", "text": text}


def tool_use_block(call_id: str, name: str, input_json: str) -> Block:
    """A tool call; `input_json` is the arguments' original JSON text."""
    return {"kind": "tool_use", "id": call_id, "name": name, "input": input_json}


def tool_result_block(tool_use_id: str, content: str, is_error: bool) -> Block:
    return {"kind": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def thinking_block(thinking: str, signature: str, **provenance: str) -> Block:
    """A thinking block, byte-exact with its signature; `provenance` may set dialect, id, model."""
    return {"kind": "thinking", "thinking": thinking, "signature": signature, **provenance}


def message(role: Role, content: list[Block]) -> Message:
    return {"role": role, "content": content}


def blocks_of(msg: Message, kind: str) -> list[Block]:
    """The blocks of `msg` whose kind is `kind`, in order."""
    return [b for b in msg.get("content", []) if b.get("kind") == kind]


def check_block(block: Any, path: str = "block") -> Block:
    """Return `block` when it is a well-formed internal block; raises `E_INVALID_ARGS` naming the
    path and the missing key or unknown kind otherwise."""
    if not isinstance(block, dict):
        raise invalid_args("read content block", path, "a content block must be a JSON object")
    kind = block.get("kind")
    if kind not in BLOCK_KINDS:
        raise invalid_args(
            f"read content block of kind {kind!r}", path, "use one of: " + ", ".join(sorted(BLOCK_KINDS))
        )
    for key in REQUIRED_KEYS[kind]:
        if key not in block:
            raise invalid_args(f"read {kind} block (no {key!r})", path, f"a {kind} block needs {key!r}")
    return block


def reply_blocks(stored_message: Any, path: str = "data.message") -> list[Block]:
    """The content blocks of a stored `model_returned.message` (`{}` reads as no content)."""
    if not isinstance(stored_message, dict):
        raise invalid_args("read reply", path, "model_returned.message must be an object")
    content = stored_message.get("content", [])
    if not isinstance(content, list):
        raise invalid_args("read reply content", f"{path}.content", "content must be an array of blocks")
    return [check_block(b, f"{path}.content[{i}]") for i, b in enumerate(content)]
