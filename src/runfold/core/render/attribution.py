"""Byte attribution of a rendered request: every byte of the body a dialect sends, traced to the
ledger line that put it there and its cause (DESIGN.md §10), exactly once.

The body is re-encoded piece by piece (compact JSON is the concatenation of its members'
encodings, the property `render.incremental` splices on), each piece carrying the owner of the
wire value it belongs to, so the spans tile the exact bytes `request_bytes` gives. Pure: the
owners come from the caller (the run fold's block sources, the prefix lines).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from runfold.core.messages import Block, is_blank_text
from runfold.core.render import anthropic, openai_chat, openai_responses, render_request
from runfold.core.render.spec import (
    ANTHROPIC,
    OPENAI_CHAT,
    RequestSpec,
    check_dialect,
    checked_messages,
    is_sent,
    request_bytes,
)

Owner = tuple[int | None, str | None]
"""`(seq, cause)`: the ledger line that put a byte into the request and its §10 cause; either may
be None (no line of its own, or a change left unattributed)."""
SEPARATOR = "\n\n"
"""What the OpenAI dialects join the system segments with (`spec.joined_system`)."""


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes `[start, end)` of a request body, put there by the line `seq` for `cause`."""

    start: int
    end: int
    seq: int | None
    cause: str | None

    @property
    def owner(self) -> Owner:
        return self.seq, self.cause


@dataclass(frozen=True)
class Attributed:
    """A request body as sent (`body`: `request_bytes` of the rendered body) and its `spans`,
    ascending, adjacent, covering every byte exactly once (neighbours never share an owner)."""

    body: bytes
    spans: tuple[Span, ...]

    def by_owner(self) -> dict[Owner, int]:
        """Bytes per `(seq, cause)`; the values add up to `len(body)`."""
        out: dict[Owner, int] = {}
        for s in self.spans:
            out[s.owner] = out.get(s.owner, 0) + s.end - s.start
        return out

    def by_cause(self) -> dict[str | None, int]:
        """Bytes per cause (None: unattributed); the values add up to `len(body)`."""
        out: dict[str | None, int] = {}
        for s in self.spans:
            out[s.cause] = out.get(s.cause, 0) + s.end - s.start
        return out


def attribute_request(
    dialect: str,
    spec: RequestSpec,
    sources: Sequence[Sequence[Owner]],
    *,
    segments: Mapping[str, Owner],
    tools: Owner,
    envelope: Owner,
) -> Attributed:
    """The bytes `render_request(dialect, spec)` sends, attributed (DESIGN.md §10).

    `sources[i][j]` owns block j of `spec.messages[i]`; `segments[slot]` a system segment;
    `tools` the tool table; `envelope` everything of the body outside them (the call settings,
    keys and punctuation of the body itself). The rule for framing bytes: a wire value's own
    keys and punctuation belong to the owner of the value — a content block, tool call, tool
    message, input item or output part to its internal block; a wire message or message item
    (its role, `content` key, brackets) to the block of its first part; a comma between two
    members to the container holding them. Anthropic's `cache_control` belongs to the block
    or segment that carries it. The OpenAI dialects' one system text is split at its segments:
    each segment's text to its owner, the blank line joining two to the segment after it, the
    quotes to the first and last. A segment slot missing from `segments` is unattributed.
    Raises like `render_request` (`E_INVALID_ARGS`).
    """
    body = render_request(check_dialect(dialect), spec).body
    marks = _Marks()
    sent = [seg for seg in spec.system if is_sent(seg)]
    seg_owner = [segments.get(seg.slot, (None, None)) for seg in sent]
    if "tools" in body:
        marks.value[id(body["tools"])] = tools
    checked = checked_messages(spec.messages)
    if dialect == ANTHROPIC:
        for block, owner in zip(body.get("system", ()), seg_owner, strict=True):
            marks.value[id(block)] = owner
        _mark_anthropic(spec, checked, sources, body["messages"], marks)
    elif dialect == OPENAI_CHAT:
        wire = body["messages"]
        if sent:
            marks.value[id(wire[0])] = seg_owner[0]
            marks.split[(id(wire[0]), "content")] = _split(sent, seg_owner)
            wire = wire[1:]
        _mark_chat(spec, checked, sources, wire, marks)
    else:
        if sent:
            marks.split[(id(body), "instructions")] = _split(sent, seg_owner)
        _mark_responses(spec, checked, sources, body["input"], marks)
    pieces: list[tuple[bytes, Owner]] = []
    marks.emit(body, envelope, pieces)
    return _spans(pieces, request_bytes(body))


def _split(sent: Sequence[Any], owners: Sequence[Owner]) -> list[tuple[str, Owner]]:
    out: list[tuple[str, Owner]] = []
    for k, (seg, owner) in enumerate(zip(sent, owners, strict=True)):
        out.append(((SEPARATOR if k else "") + seg.text, owner))
    return out


class _Marks:
    """Owners of wire values: `value` by the id of a dict or list of the body (the renderers
    build each of those fresh), `split` for a string under `(id(container), key)` made of
    pieces with owners of their own, `keyed` for a string under `(id(container), key)`."""

    def __init__(self) -> None:
        self.value: dict[int, Owner] = {}
        self.keyed: dict[tuple[int, str], Owner] = {}
        self.split: dict[tuple[int, str], list[tuple[str, Owner]]] = {}

    def emit(self, value: Any, owner: Owner, out: list[tuple[bytes, Owner]]) -> None:
        owner = self.value.get(id(value), owner)
        if isinstance(value, dict):
            out.append((b"{", owner))
            for n, (key, item) in enumerate(value.items()):
                out.append(((b"," if n else b"") + orjson.dumps(key) + b":", owner))
                where = (id(value), key)
                pieces = self.split.get(where)
                if pieces is not None:
                    _emit_split(pieces, out)
                else:
                    self.emit(item, self.keyed.get(where, owner), out)
            out.append((b"}", owner))
        elif isinstance(value, list):
            out.append((b"[", owner))
            for n, item in enumerate(value):
                if n:
                    out.append((b",", owner))
                self.emit(item, owner, out)
            out.append((b"]", owner))
        else:
            out.append((orjson.dumps(value), owner))


def _emit_split(pieces: list[tuple[str, Owner]], out: list[tuple[bytes, Owner]]) -> None:
    """A JSON string made of `pieces`: each piece's escaped text to its owner (JSON escapes
    character by character, so the pieces' encodings concatenate to the whole's)."""
    last = len(pieces) - 1
    for k, (text, owner) in enumerate(pieces):
        encoded = orjson.dumps(text)
        out.append((encoded[(0 if k == 0 else 1) : (len(encoded) if k == last else -1)], owner))


def _spans(pieces: list[tuple[bytes, Owner]], body: bytes) -> Attributed:
    spans: list[Span] = []
    at = 0
    for chunk, owner in pieces:
        if not chunk:
            continue
        end = at + len(chunk)
        if spans and spans[-1].owner == owner:
            prev = spans[-1]
            spans[-1] = Span(prev.start, end, prev.seq, prev.cause)
        else:
            spans.append(Span(at, end, owner[0], owner[1]))
        at = end
    joined = b"".join(chunk for chunk, _ in pieces)
    if joined != body:  # the concatenation property every splice of the renderers relies on
        raise AssertionError("attributed pieces do not concatenate to the request bytes")
    return Attributed(body, tuple(spans))


def _mark_anthropic(
    spec: RequestSpec,
    checked: list[tuple[str, list[Block]]],
    sources: Sequence[Sequence[Owner]],
    wire: list[dict[str, Any]],
    marks: _Marks,
) -> None:
    sent: list[Owner] = []
    for i, (_, blocks) in enumerate(checked):
        for j, block in enumerate(blocks):
            if anthropic.render_block(spec, block, f"messages[{i}].content[{j}]") is not None:
                sent.append(sources[i][j])
    flat = [(msg, block) for msg in wire for block in msg["content"]]
    for (msg, block), owner in zip(flat, sent, strict=True):
        marks.value.setdefault(id(msg), owner)
        marks.value[id(block)] = owner


def _next_match(pending: Iterator[tuple[Block, Owner]], match: Any) -> Owner:
    """The owner of the next block of `pending` for which `match(block)` holds (blocks the
    dialect does not send are passed over)."""
    for block, owner in pending:
        if match(block):
            return owner
    raise AssertionError("a wire value with no block it was rendered from")


def _mark_parts(msg: dict[str, Any], pending: Iterator[tuple[Block, Owner]], marks: _Marks, keys: Any) -> None:
    """Mark a message whose `content` is a text (one part) or a list of parts; each part's
    block is the next whose `keys(block)` equals the part's (text, kind) signature."""
    content = msg["content"]
    if isinstance(content, str):
        owner = _next_match(pending, lambda b: keys(b) == ("text", content))
        marks.value[id(msg)] = owner
        marks.keyed[(id(msg), "content")] = owner
        return
    for part in content:
        sig = _part_signature(part)
        owner = _next_match(pending, lambda b, sig=sig: keys(b) == sig)
        marks.value.setdefault(id(msg), owner)
        marks.value[id(part)] = owner


def _part_signature(part: dict[str, Any]) -> tuple[str, str]:
    kind = part["type"]
    if kind in ("text", "output_text", "input_text"):
        return "text", part["text"]
    return "image", ""


def _block_signature(block: Block) -> tuple[str, str] | None:
    if block["kind"] == "text" and not is_blank_text(block):
        return "text", block["text"]
    if block["kind"] == "image":
        return "image", ""
    return None


def _mark_chat(
    spec: RequestSpec,
    checked: list[tuple[str, list[Block]]],
    sources: Sequence[Sequence[Owner]],
    wire: list[dict[str, Any]],
    marks: _Marks,
) -> None:
    at = 0
    order: dict[str, int] = {}
    for i, (role, blocks) in enumerate(checked):
        pieces, order = openai_chat.render_message(spec, i, role, blocks, order)
        mine = wire[at : at + len(pieces)]
        at += len(pieces)
        owned = list(zip(blocks, sources[i], strict=True))
        answered: set[int] = set()  # results already matched to a tool message
        for msg in mine:
            if msg["role"] == "tool":
                k = next(
                    k
                    for k, (b, _) in enumerate(owned)
                    if k not in answered
                    and b["kind"] == "tool_result"
                    and b["tool_use_id"] == msg["tool_call_id"]
                    and b["content"] == msg["content"]
                )
                answered.add(k)
                marks.value[id(msg)] = owned[k][1]
                continue
            if msg["content"] is not None:
                _mark_parts(msg, iter(owned), marks, _block_signature)
            calls = iter(owned)
            for call in msg.get("tool_calls", ()):
                owner = _next_match(calls, lambda b, c=call: b["kind"] == "tool_use" and b["id"] == c["id"])
                marks.value[id(call)] = owner
            if role == "assistant":  # the message opens with its first sent block, text or call
                first = next(o for b, o in owned if b["kind"] == "tool_use" or _block_signature(b))
                marks.value[id(msg)] = first


def _mark_responses(
    spec: RequestSpec,
    checked: list[tuple[str, list[Block]]],
    sources: Sequence[Sequence[Owner]],
    wire: list[dict[str, Any]],
    marks: _Marks,
) -> None:
    at = 0
    for i, (role, blocks) in enumerate(checked):
        items = openai_responses.render_message(spec, i, role, blocks)
        mine = wire[at : at + len(items)]
        at += len(items)
        pending = iter(list(zip(blocks, sources[i], strict=True)))
        for item in mine:
            kind = item["type"]
            if kind == "message":
                _mark_parts(item, pending, marks, _block_signature)
                continue
            if kind == "function_call_output":
                owner = _next_match(
                    pending, lambda b, it=item: b["kind"] == "tool_result" and b["tool_use_id"] == it["call_id"]
                )
            elif kind == "function_call":
                owner = _next_match(pending, lambda b, it=item: b["kind"] == "tool_use" and b["id"] == it["call_id"])
            else:  # reasoning
                owner = _next_match(
                    pending,
                    lambda b, it=item: b["kind"] == "thinking" and b["signature"] == it["encrypted_content"],
                )
            marks.value[id(item)] = owner
