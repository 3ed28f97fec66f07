"""Incremental rendering: one run's requests rendered in time independent of its history (DESIGN.md §6, §8).

Request n+1 extends request n, so every message already rendered renders the same again. An
`IncrementalRenderer` keeps each message's rendered wire form and, per request, renders only the
messages that are new or changed (in a run: the open last message), then rebuilds the body
around the kept pieces. `render_request` stays the reference; both give byte-identical bodies.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from runfold.core.messages import Block, Message
from runfold.core.render import anthropic, openai_chat, openai_responses
from runfold.core.render.spec import (
    ANTHROPIC,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    Rendered,
    RequestSpec,
    check_dialect,
    checked_message,
)


def first_difference(old: tuple[Any, ...], old_last_len: int, new: Sequence[Any]) -> int:
    """The first index where `new` differs from `old` (the messages of the previous call).

    Messages are compared with `==`, which is an identity check (C speed, no Python code per
    message) for the conversation's own objects; an equal copy counts as the same message (it
    renders the same). A message may have grown in place only if it was `old`'s last message
    (`Conversation` only ever appends blocks to its last message): its block count is compared
    with `old_last_len`. `min(len(old), len(new))` when one is a prefix of the other.
    """
    m = min(len(old), len(new))
    head = tuple(new[:m])
    if head != old[:m]:
        return list(map(operator.eq, head, old[:m])).index(False)
    if m and m == len(old) and len(new[m - 1]["content"]) != old_last_len:
        return m - 1
    return m


class IncrementalRenderer:
    """Renders the successive requests of one run (one dialect, one frozen prefix) incrementally.

    `spec` carries everything but the messages (its `messages` are ignored; its `images` are
    fixed for the renderer's life). `render(messages)` returns what
    `render_request(dialect, replace(spec, messages=messages))` returns — byte-identical under
    `request_bytes` — doing per-message work only for the messages that differ from the last
    call: a message is reused when it equals (normally: is) the message at its index in the
    previous call; only the previous call's last message may have had blocks appended in place
    since (that is all `Conversation` does: it never edits a block, only appends blocks to its
    open last message, pops an unsent reply, or appends messages; the run loop's
    `check_extends_last_sent` proves it for every request). Pass the conversation's own
    messages (`Conversation.messages_view()`): equal copies work but cost a deep comparison.

    `rendered` counts the messages rendered so far (the complexity tests read it). Raises what
    `render_request` raises (`E_INVALID_ARGS` naming `messages[i].content[j]`); after a raise
    the renderer starts from scratch on its next call. Raises `E_INVALID_ARGS` at construction
    for an unknown dialect.
    """

    def __init__(self, dialect: str, spec: RequestSpec) -> None:
        self.dialect = check_dialect(dialect)
        self.spec = replace(spec, messages=())
        self.rendered = 0
        self._src: tuple[Message, ...] = ()  # the messages of the last call
        self._last_len = 0  # the block count of its last message then
        self._orders: list[dict[str, int]] = []  # Chat: call order each message hands the next
        # The wire: flat pieces (Chat messages / Responses items / Anthropic messages merged).
        self._wire: list[dict[str, Any]] = []
        self._offsets: list[int] = []  # Chat/Responses: len(wire) before message i
        self._snaps: list[tuple[int, dict[str, Any] | None]] = []  # Anthropic: (len(wire), wire[-1]) after i
        # orjson bytes of wire[0:len(_ends)] joined by commas (each piece encoded once, kept);
        # _ends[i] is where piece i ends in _joined
        self._joined = bytearray()
        self._ends: list[int] = []
        self._walk: list[int] = []  # Anthropic: the tool-loop walk back from wire[o] (anthropic.loop_step)
        self.walked = 0  # walk steps taken so far (the complexity tests read it)
        self._uncached = 0  # RequestSpec.uncached_tail of the current call

    def reset(self) -> None:
        """Forget every rendered message (the next call renders all)."""
        self._src, self._last_len, self._orders = (), 0, []
        self._wire, self._offsets, self._snaps, self._walk = [], [], [], []
        self._joined, self._ends = bytearray(), []

    def render(self, messages: Sequence[Message], uncached_tail: int = 0) -> Rendered:
        """The request body and breakpoints for `messages` (`uncached_tail`: see `RequestSpec`);
        see the class docstring."""
        self._uncached = uncached_tail
        k = first_difference(self._src, self._last_len, messages)
        try:
            self._truncate(k)
            suffix = [checked_message(i, messages[i]) for i in range(k, len(messages))]
            for offset, (role, blocks) in enumerate(suffix):
                self._add(k + offset, role, blocks)
            self._src = tuple(messages)
            self._last_len = len(messages[-1]["content"]) if messages else 0
            return self._finish()
        except BaseException:
            self.reset()
            raise

    def render_bytes(self, messages: Sequence[Message], uncached_tail: int = 0) -> tuple[Rendered, bytes]:
        """`render(messages)` and the body's exact bytes, equal to `request_bytes(body)`.

        The bytes are spliced from each kept piece's orjson bytes (encoded once, when the piece
        was rendered) and the parts around them encoded per call: compact JSON is the
        concatenation of its members' encodings, so this is byte-identical, at memcpy speed
        instead of re-encoding the whole history (DESIGN.md §4: these bytes are hashed into
        `model_called.request`).
        """
        rendered = self.render(messages, uncached_tail)
        return rendered, self._body_bytes(rendered.body)

    # ---- per dialect ------------------------------------------------------------------------

    def _truncate(self, k: int) -> None:
        del self._orders[k:]
        if self.dialect == ANTHROPIC:
            del self._snaps[k:]
            length, last = self._snaps[k - 1] if k else (0, None)
            del self._wire[length:]
            if length and self._wire[length - 1] is not last:
                assert last is not None
                self._wire[length - 1] = last
                self._cut(length - 1)
                del self._walk[length - 1 :]
            self._cut(length)
            del self._walk[length:]
        else:
            if k < len(self._offsets):
                self._cut(self._offsets[k])
                del self._wire[self._offsets[k] :]
            del self._offsets[k:]

    def _add(self, i: int, role: str, blocks: list[Block]) -> None:
        self.rendered += 1
        wire = self._wire
        if self.dialect == ANTHROPIC:
            content = anthropic.render_content(self.spec, i, blocks)
            if content:
                if wire and wire[-1]["role"] == role:
                    # never edit a kept piece: the merged message is a new object
                    wire[-1] = {"role": role, "content": wire[-1]["content"] + content}
                    self._cut(len(wire) - 1)
                    del self._walk[len(wire) - 1 :]
                else:
                    wire.append({"role": role, "content": content})
            self._snaps.append((len(wire), wire[-1] if wire else None))
            return
        self._offsets.append(len(wire))
        if self.dialect == OPENAI_CHAT:
            before = self._orders[i - 1] if i else {}
            pieces, order = openai_chat.render_message(self.spec, i, role, blocks, before)
            self._orders.append(order)
            wire.extend(pieces)
        else:
            wire.extend(openai_responses.render_message(self.spec, i, role, blocks))

    def _finish(self) -> Rendered:
        if self.dialect == ANTHROPIC:
            messages = list(self._wire)
            if messages and self.spec.cache_breakpoints:
                last = messages[-1]
                # a fresh last message: `finish` marks its tail block in place
                messages[-1] = {"role": last["role"], "content": [dict(b) for b in last["content"]]}
            opener = None
            thinking = self.spec.thinking
            if thinking is not None and "type" in thinking and len(messages) >= 2:
                walk, wire = self._walk, self._wire
                for o in range(len(walk), len(wire)):
                    self.walked += 1
                    walk.append(anthropic.loop_step(wire, o, walk[o - 2] if o >= 2 else o))
                opener = walk[len(wire) - 2]
            spec = replace(self.spec, uncached_tail=self._uncached) if self._uncached else self.spec
            return anthropic.finish(spec, messages, opener)
        if self.dialect == OPENAI_CHAT:
            return openai_chat.finish(self.spec, self._wire)
        return openai_responses.finish(self.spec, list(self._wire))

    def _cut(self, j: int) -> None:
        """Forget the bytes of wire pieces j.. (they changed or are gone)."""
        if j < len(self._ends):
            del self._ends[j:]
            del self._joined[self._ends[-1] if self._ends else 0 :]

    def _body_bytes(self, body: dict[str, Any]) -> bytes:
        wire, joined, ends = self._wire, self._joined, self._ends
        for piece in wire[len(ends) :]:
            if ends:
                joined += b","
            joined += orjson.dumps(piece)
            ends.append(len(joined))
        key = "input" if self.dialect == OPENAI_RESPONSES else "messages"
        items: list[Any] = body[key]
        lead = len(items) - len(wire)  # Chat: the system message before the conversation
        before = [orjson.dumps(x) for x in items[:lead]]
        after: list[bytes] = []
        kept = len(joined)
        if self.dialect == ANTHROPIC and items and self.spec.cache_breakpoints:
            kept = ends[-2] if len(ends) >= 2 else 0
            after.append(orjson.dumps(items[-1]))  # the fresh copy carrying the tail breakpoint
        with memoryview(joined) as view:
            return splice(body, key, before, view[:kept], after)


def splice(body: dict[str, Any], key: str, before: list[bytes], middle: Any, after: list[bytes]) -> bytes:
    """`orjson.dumps(body)` where the list `body[key]` encodes to the item encodings `before`,
    then the comma-joined items `middle` (bytes-like, may be empty), then the items `after`."""
    keys = list(body)
    at = keys.index(key)
    head = orjson.dumps({k: body[k] for k in keys[:at]})[:-1]  # b'{...' without the closing brace
    tail = orjson.dumps({k: body[k] for k in keys[at + 1 :]})[1:]  # b'...}' without the opening brace
    parts = [*before, middle] if len(middle) else list(before)
    parts += after
    inner: list[Any] = []
    for part in parts:  # a handful of parts: the middle is one buffer however long the history
        if inner:
            inner.append(b",")
        inner.append(part)
    return b"".join(
        (
            head,
            b"," if at else b"",
            orjson.dumps(key),
            b":[",
            *inner,
            b"]",
            b"," if len(tail) > 1 else b"",
            tail,
        )
    )
