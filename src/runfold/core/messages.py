"""The internal message model every provider dialect is rendered from (DESIGN.md §8).

A message is `{"role": "user"|"assistant", "content": [block, ...]}`; a block is a JSON object
tagged by the key `kind`, typed here as one `TypedDict` per kind so that code narrowing on `kind`
has the keys it reads checked. They stay plain dicts: exactly what `model_returned.message`
stores (float-free, canonical), byte for byte.

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

# No `from __future__ import annotations`: on Python 3.11 it makes the TypedDict classes report
# their `NotRequired` keys as required (`__required_keys__`) to anything reading them at runtime.

import typing
from typing import Literal, NotRequired, TypedDict, cast

from runfold.core.errors import invalid_args

Role = Literal["user", "assistant"]


class TextBlock(TypedDict):
    kind: Literal["text"]
    text: str


class ThinkingBlock(TypedDict):
    kind: Literal["thinking"]
    thinking: str
    signature: str
    dialect: NotRequired[str]
    id: NotRequired[str]
    model: NotRequired[str]


class RedactedThinkingBlock(TypedDict):
    kind: Literal["redacted_thinking"]
    data: str
    dialect: NotRequired[str]
    model: NotRequired[str]


class ToolUseBlock(TypedDict):
    kind: Literal["tool_use"]
    id: str
    name: str
    input: str


class ToolResultBlock(TypedDict):
    kind: Literal["tool_result"]
    tool_use_id: str
    content: str
    is_error: bool


class ImageBlock(TypedDict):
    kind: Literal["image"]
    locator: str
    media_type: str


Block = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock | ImageBlock
"""A content block: one of the kinds above, told apart by `kind`."""


class Message(TypedDict):
    role: Role
    content: list[Block]


_CLASSES: dict[str, object] = {
    "text": TextBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "image": ImageBlock,
}

BLOCK_KINDS: frozenset[str] = frozenset(_CLASSES)
"""The wire names of the block kinds."""


def _schema(cls: object) -> tuple[tuple[str, type, bool], ...]:
    """(key, JSON type, required) for each key of a block class but `kind`, in declared order."""
    out = []
    for key, hint in typing.get_type_hints(cls, include_extras=True).items():
        if key == "kind":
            continue
        optional = typing.get_origin(hint) is NotRequired
        tp = typing.get_args(hint)[0] if optional else hint
        out.append((key, tp, not optional))
    return tuple(out)


SCHEMAS: dict[str, tuple[tuple[str, type, bool], ...]] = {k: _schema(c) for k, c in _CLASSES.items()}
"""Per kind, (key, JSON type, required) of each key but `kind`: read from the classes above, so
the checker and the types cannot disagree."""

_JSON_NAMES = {str: "string", bool: "boolean"}


def text_block(text: str) -> TextBlock:
    return {"kind": "text", "text": text}


def tool_use_block(call_id: str, name: str, input_json: str) -> ToolUseBlock:
    """A tool call; `input_json` is the arguments' original JSON text."""
    return {"kind": "tool_use", "id": call_id, "name": name, "input": input_json}


def tool_result_block(tool_use_id: str, content: str, is_error: bool) -> ToolResultBlock:
    return {"kind": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def thinking_block(
    thinking: str,
    signature: str,
    *,
    dialect: str | None = None,
    id: str | None = None,
    model: str | None = None,
) -> ThinkingBlock:
    """A thinking block, byte-exact with its signature, with the provenance given (`dialect`,
    the Responses item `id`, `model`; keys in that order, omitted when None)."""
    block: ThinkingBlock = {"kind": "thinking", "thinking": thinking, "signature": signature}
    if dialect is not None:
        block["dialect"] = dialect
    if id is not None:
        block["id"] = id
    if model is not None:
        block["model"] = model
    return block


def redacted_thinking_block(
    data: str, *, dialect: str | None = None, model: str | None = None
) -> RedactedThinkingBlock:
    """A redacted thinking block (opaque `data`), with the provenance given (omitted when None)."""
    block: RedactedThinkingBlock = {"kind": "redacted_thinking", "data": data}
    if dialect is not None:
        block["dialect"] = dialect
    if model is not None:
        block["model"] = model
    return block


def message(role: Role, content: list[Block]) -> Message:
    return {"role": role, "content": content}


def is_blank_text(block: Block) -> bool:
    """True for a text block with no non-whitespace character: providers refuse those, so no
    renderer sends them and the conversation never holds one (the ledger keeps them)."""
    return block["kind"] == "text" and not block["text"].strip()


def check_block(block: object, path: str = "block") -> Block:
    """Return `block` itself (not a copy) when it is a well-formed internal block: a JSON object
    whose `kind` is one of BLOCK_KINDS, with every required key of that kind and each known key
    of its JSON type (keys this build does not know are kept). The one door through which a
    block read from JSON (the ledger, a script file, a provider's reply) becomes a `Block`.
    Raises `E_INVALID_ARGS` naming `path` and the missing key, the mistyped key or the unknown
    kind."""
    if not isinstance(block, dict):
        raise invalid_args("read content block", path, "a content block must be a JSON object")
    kind = block.get("kind")
    schema = SCHEMAS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        raise invalid_args(
            f"read content block of kind {kind!r}", path, "use one of: " + ", ".join(sorted(BLOCK_KINDS))
        )
    for key, tp, required in schema:
        if key not in block:
            if required:
                raise invalid_args(f"read {kind} block (no {key!r})", path, f"a {kind} block needs {key!r}")
            continue
        if not isinstance(block[key], tp):
            raise invalid_args(
                f"read {kind} block ({key!r} is not a {_JSON_NAMES[tp]})",
                f"{path}.{key}",
                f"a {kind} block's {key!r} is a JSON {_JSON_NAMES[tp]}",
            )
    return cast(Block, block)  # checked above against the kind's class


def reply_blocks(stored_message: object, path: str = "data.message") -> list[Block]:
    """The content blocks of a stored `model_returned.message` (`{}` reads as no content), each
    read by `check_block`. Raises `E_INVALID_ARGS` naming the path."""
    if not isinstance(stored_message, dict):
        raise invalid_args("read reply", path, "model_returned.message must be an object")
    content = stored_message.get("content", [])
    if not isinstance(content, list):
        raise invalid_args("read reply content", f"{path}.content", "content must be an array of blocks")
    return [check_block(b, f"{path}.content[{i}]") for i, b in enumerate(content)]
