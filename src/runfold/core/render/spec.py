"""The input every renderer takes (`RequestSpec`) and the helpers the three dialects share.

A request is the frozen prefix (system segments + tool table) plus the conversation (internal
messages, DESIGN.md §8) plus a few call settings. Keeping this in one module lets each dialect
module stay a straight projection, and lets `render/__init__` re-export the types without import
cycles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from runfold.core.canonical import I64_MIN, U64_MAX, encode_json
from runfold.core.errors import invalid_args
from runfold.core.messages import (
    Block,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    ThinkingBlock,
    check_block,
)

ANTHROPIC: Final = "anthropic"
OPENAI_CHAT: Final = "openai-chat"
OPENAI_RESPONSES: Final = "openai-responses"
DIALECTS: Final[tuple[str, ...]] = (ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES)
"""Wire names of the dialects a request can be rendered to."""

TAIL: Final = "tail"
"""The breakpoint label of the cache breakpoint placed on the conversation's last message."""
TOOLS: Final = "tools"
"""The breakpoint label of a breakpoint on the last tool (only when there is no system text)."""
MAX_BREAKPOINTS: Final = 4
"""Anthropic accepts at most four `cache_control` breakpoints per request."""

USER_KINDS: Final = frozenset({"text", "tool_result", "image"})
ASSISTANT_KINDS: Final = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})


@dataclass(frozen=True)
class SystemSegment:
    """One system segment of the frozen prefix (DESIGN.md §8), in prompt order.

    `slot` is the segment's name as recorded in `prompt_assembled.segments` (e.g. `workspace`,
    `room`, `agent`, `run`); `text` is sent verbatim. `edge=True` marks a stable edge: an
    Anthropic cache breakpoint may be placed after this segment (the last sent segment is always
    an edge). Segments whose text is empty or whitespace only are not sent (providers refuse
    blank text).
    """

    slot: str
    text: str
    edge: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """One entry of the tool table: name, description and the JSON Schema of its input.

    `strict` is OpenAI's strict-schema flag; None leaves Chat at its default and sends
    `strict: false` to Responses (whose default is strict). Raises `E_INVALID_ARGS` naming the
    schema path when it holds a non-finite number, an integer beyond i64/u64, a non-string key
    or a non-JSON value (it could not be encoded exactly).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    strict: bool | None = None

    def __post_init__(self) -> None:
        _check_encodable(self.input_schema, f"tools[{self.name}].input_schema")


@dataclass(frozen=True)
class RequestSpec:
    """Everything a request body is rendered from; rendering is a pure function of it.

    - `model`: the provider's model name.
    - `system`: the frozen prefix's system segments, in order.
    - `tools`: the tool table, in order.
    - `messages`: internal messages (`core/messages.py`), alternating user/assistant.
    - `max_tokens`: output limit in tokens (`max_tokens` / `max_completion_tokens` /
      `max_output_tokens`).
    - `cache_key`: OpenAI `prompt_cache_key` (stable per run); None omits it.
    - `thinking`: Anthropic keys (`type`, `budget_tokens`) are sent as `thinking`; OpenAI keys
      (`effort`, `summary`) become Responses `reasoning` and Chat `reasoning_effort`.
    - `stream`: ask for a server-sent-event stream.
    - `temperature_milli`: sampling temperature in per-mille (700 = 0.7), converted to the float
      the APIs take only at render time so the ledger stays float-free; None omits it.
    - `images`: base64 data of each image block's CAS locator (the core performs no I/O, so the
      caller resolves locators first).
    - `cache_breakpoints`: place Anthropic `cache_control` breakpoints (DESIGN.md §8).
    - `uncached_tail`: how many trailing blocks of the last message follow the tail breakpoint
      (the context regions block of `core.regions.with_regions`: it changes between requests,
      so the breakpoint goes on the last block before it and the cached prefix survives).
    """

    model: str
    system: Sequence[SystemSegment] = ()
    tools: Sequence[ToolSpec] = ()
    messages: Sequence[Message] = ()
    max_tokens: int = 4096
    cache_key: str | None = None
    thinking: dict[str, Any] | None = None
    stream: bool = False
    temperature_milli: int | None = None
    images: Mapping[str, str] = field(default_factory=dict)
    cache_breakpoints: bool = True
    uncached_tail: int = 0


@dataclass(frozen=True)
class Rendered:
    """A rendered request: the body (key order as sent) and the cache breakpoints placed.

    `breakpoints` lists slot names, `tools` and/or `tail` in request order; it is what
    `prompt_assembled.breakpoints` records (always empty for the OpenAI dialects).
    """

    body: dict[str, Any]
    breakpoints: tuple[str, ...] = ()


def check_dialect(dialect: str) -> str:
    """Return `dialect` when it is one of DIALECTS; raises `E_INVALID_ARGS` naming the choices."""
    if dialect not in DIALECTS:
        raise invalid_args(
            "render a request", f"dialect {dialect!r}", "use one of: " + ", ".join(DIALECTS), DIALECTS
        )
    return dialect


def checked_messages(messages: Sequence[Message]) -> list[tuple[str, list[Block]]]:
    """The messages as (role, blocks) after checking each block's shape and that its kind may
    appear in its role. Raises `E_INVALID_ARGS` naming `messages[i]` / `messages[i].content[j]`."""
    return [checked_message(i, msg) for i, msg in enumerate(messages)]


def checked_message(i: int, msg: Message) -> tuple[str, list[Block]]:
    """Message `i` as (role, blocks) after the checks of `checked_messages` (one message: the
    incremental renderer checks each message once). Raises `E_INVALID_ARGS` naming
    `messages[i]` / `messages[i].content[j]`."""
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise invalid_args("render message", where, "a message must be an object {role, content}")
    role = msg.get("role")
    if role not in ("user", "assistant"):
        raise invalid_args(f"render message with role {role!r}", where, "use role user or assistant")
    content = msg.get("content", [])
    if not isinstance(content, list):
        raise invalid_args("render message", f"{where}.content", "content must be an array of blocks")
    allowed = USER_KINDS if role == "user" else ASSISTANT_KINDS
    blocks = []
    for j, raw in enumerate(content):
        block = check_block(raw, f"{where}.content[{j}]")
        if block["kind"] not in allowed:
            raise invalid_args(
                f"render a {block['kind']} block in a {role} message",
                f"{where}.content[{j}]",
                f"a {role} message holds only " + ", ".join(sorted(allowed)) + " blocks",
            )
        blocks.append(block)
    return str(role), blocks


def thinking_kept(block: ThinkingBlock | RedactedThinkingBlock, dialect: str, model: str) -> bool:
    """Whether a thinking/redacted_thinking block may be sent to `dialect` for `model`.

    A block is kept only when it was produced by this dialect (a block without `dialect` counts
    as Anthropic, the only dialect that wrote signatures before provenance was recorded) and by
    this model (a block without `model` counts as this model). Foreign thinking is omitted whole,
    never edited (DESIGN.md §8).
    """
    produced_by = block.get("dialect", ANTHROPIC)
    if produced_by != dialect:
        return False
    produced_model = block.get("model")
    return produced_model is None or produced_model == model


def image_data(spec: RequestSpec, block: ImageBlock, where: str) -> str:
    """The base64 data of an image block. Raises `E_INVALID_ARGS` naming `where` when the
    caller did not resolve its locator into `spec.images`."""
    locator = block["locator"]
    data = spec.images.get(locator)
    if data is None:
        raise invalid_args(
            f"render image {locator}",
            where,
            "read the image from the content store and pass its base64 data in RequestSpec.images",
        )
    return data


def temperature(spec: RequestSpec) -> float | None:
    """`temperature_milli` as the float the APIs take (None when unset)."""
    return None if spec.temperature_milli is None else spec.temperature_milli / 1000


UNPARSED_ARGUMENTS: Final = "_unparsed_arguments"
"""Key under which Anthropic receives arguments text that is not a JSON object."""


def parse_arguments(text: str) -> dict[str, Any]:
    """A tool call's original arguments text as the object Anthropic's `tool_use.input` takes.

    Parsed with orjson; numbers keep orjson's reading (integers beyond 64 bits and floats become
    doubles), and `request_bytes` re-encodes them with orjson's shortest round-trip form, so the
    same text always renders to the same bytes. Text that is not a JSON object (a cut stream, a
    model that wrote invalid JSON, a bare array) renders as `{"_unparsed_arguments": text}`
    rather than failing, so a history holding such a call can still be sent.
    """
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {UNPARSED_ARGUMENTS: text}
    if not isinstance(value, dict):
        return {UNPARSED_ARGUMENTS: text}
    return value


def joined_system(spec: RequestSpec) -> str:
    """The sent (non-blank) system segments joined by a blank line (the OpenAI dialects take one
    system text)."""
    return "\n\n".join(s.text for s in spec.system if is_sent(s))


def is_sent(segment: SystemSegment) -> bool:
    """True when the segment has non-whitespace text (blank segments are never sent)."""
    return bool(segment.text.strip())


def request_bytes(body: Mapping[str, Any]) -> bytes:
    """The exact bytes sent and hashed (BLAKE3) into `model_called.request` (DESIGN.md §4).

    Compact JSON, keys in the order the renderer built them, raw UTF-8. Floats occur only in
    tool inputs parsed from a model's JSON text, in tool schemas and in `temperature`; orjson
    writes each as its shortest round-trip decimal, so replay reproduces the bytes exactly (pin
    orjson's major version: that spelling is part of the request hash).
    """
    return orjson.dumps(body)


def tools_bytes(tools: Sequence[ToolSpec]) -> bytes:
    """Canonical bytes of the tool table for `prompt_assembled.tools {hash, bytes}`.

    A JSON array of `{description, input_schema, name[, strict]}` objects in table order, keys
    sorted recursively (DESIGN.md §3 canonical JSON); independent of the dialect the table is
    later rendered to.
    """
    table = []
    for tool in tools:
        entry: dict[str, Any] = {
            "description": tool.description,
            "input_schema": tool.input_schema,
            "name": tool.name,
        }
        if tool.strict is not None:
            entry["strict"] = tool.strict
        table.append(entry)
    return encode_json(table)


def _check_encodable(value: Any, path: str) -> None:
    """Refuse what orjson could not write exactly: non-finite floats, integers beyond i64/u64,
    non-string keys and non-JSON types."""
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not I64_MIN <= value <= U64_MAX:
            raise invalid_args(
                "encode tool schema", path, "integers must fit i64/u64; write the number as a string"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise invalid_args("encode tool schema", path, "JSON has no NaN or infinity; use a finite number")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise invalid_args("encode tool schema", f"{path}[{key!r}]", "object keys must be strings")
            _check_encodable(item, f"{path}.{key}")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_encodable(item, f"{path}[{index}]")
        return
    raise invalid_args(
        f"encode {type(value).__name__} in tool schema",
        path,
        "a schema holds only JSON values (dict, list, str, number, bool, null)",
    )


def need(obj: Any, key: str, kind: type, path: str) -> Any:
    """`obj[key]` when `obj` is an object holding a value of type `kind` there; raises
    `E_INVALID_ARGS` naming `path.key` otherwise (used to read provider responses)."""
    if not isinstance(obj, Mapping):
        raise invalid_args("read reply", path, "this field must be a JSON object")
    value = obj.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise invalid_args(
            f"read reply field {key!r}",
            f"{path}.{key}",
            f"the provider's response must hold a {kind.__name__} here; check the dialect",
        )
    return value
