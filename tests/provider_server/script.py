"""The script a provider test server answers from: replies in runfold's internal message form
and injected faults, one entry per accepted request.

A script is the same data a scripted model plays back (DESIGN.md §8: blocks tagged by `kind`), so
one session can be driven through every dialect; faults stand in for the provider misbehaving.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runfold.core.errors import invalid_args

STOPS = ("end_turn", "tool_use", "max_tokens", "refusal")
"""Stop reasons a scripted reply may name; the dialects map them (Chat: `stop`/`tool_calls`/
`length`/`content_filter`; Responses: `completed`, or `incomplete` for max_tokens/refusal)."""

FAULTS = ("http_429", "http_500", "http_529", "http_400_refusal", "http_400_echo_auth", "cut_stream", "stream_error")
"""Injected faults. `http_*` answer with that status in the provider's error shape (`http_529`
is Anthropic's overloaded; the OpenAI endpoints answer it as 503); `cut_stream` closes the
connection after `after_events` SSE events (or mid-body when not streaming); `stream_error`
sends the provider's in-stream error event after `after_events` events; `http_400_echo_auth`
answers 400 with a message echoing the request's credential headers in full (as a misbehaving
gateway does), so a test can check that the key never reaches the ledger."""

REPLY_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")
USAGE_KEYS = ("input", "output", "cache_read", "cache_write")


@dataclass(frozen=True)
class Usage:
    """Token counts of a scripted reply. `input` counts uncached prompt tokens (Anthropic's
    `input_tokens`); `cache_read`/`cache_write` are prompt tokens read from / written to the
    prompt cache; OpenAI's `prompt_tokens` is rendered as their sum."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def prompt_total(self) -> int:
        """Every prompt token, cached or not (OpenAI `prompt_tokens` / `input_tokens`)."""
        return self.input + self.cache_read + self.cache_write


@dataclass(frozen=True)
class Reply:
    """One scripted model reply: internal blocks (`text`, `thinking`, `redacted_thinking`,
    `tool_use`), the stop reason (None: `tool_use` when the reply calls tools, else `end_turn`),
    usage (None: estimated from the sizes), and a delay in ms before the answer starts."""

    blocks: tuple[dict[str, Any], ...]
    stop: str | None = None
    usage: Usage | None = None
    delay_ms: int = 0

    @property
    def stop_reason(self) -> str:
        if self.stop is not None:
            return self.stop
        return "tool_use" if any(b["kind"] == "tool_use" for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class Fault:
    """One injected fault (see `FAULTS`); `retry_after_ms` feeds the 429 headers."""

    fault: str
    retry_after_ms: int | None = None
    after_events: int = 0
    delay_ms: int = 0
    reply: Reply | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def partial(self) -> Reply:
        """The reply whose first events stream before a `cut_stream`/`stream_error` fault (the
        entry's own `content`, or one text block)."""
        return self.reply or Reply(({"kind": "text", "text": "This reply is cut short by the test server."},))


Entry = Reply | Fault


def _int(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise invalid_args("read script entry", where, f"use an integer >= {minimum}")
    return value


def _block(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("kind") not in REPLY_BLOCKS:
        raise invalid_args(
            "read reply block",
            where,
            "a reply block is an object whose `kind` is one of " + ", ".join(REPLY_BLOCKS),
        )
    kind = raw["kind"]
    need = {
        "text": ("text",),
        "thinking": ("thinking", "signature"),
        "redacted_thinking": ("data",),
        "tool_use": ("id", "name", "input"),
    }[kind]
    if kind == "tool_use" and isinstance(raw.get("input"), dict):
        # an object is accepted and kept as compact JSON text (as the scripted provider does)
        raw = {**raw, "input": json.dumps(raw["input"], separators=(",", ":"), ensure_ascii=False)}
    for key in need:
        if not isinstance(raw.get(key), str):
            raise invalid_args(
                f"read {kind} block", f"{where}.{key}", f"a {kind} block needs the string {key!r}"
            )
    if kind == "tool_use":
        try:
            args = json.loads(raw["input"])
        except ValueError as err:
            raise invalid_args(
                "read tool_use input", f"{where}.input", f"`input` must be JSON text of an object ({err})"
            ) from None
        if not isinstance(args, dict):
            raise invalid_args(
                "read tool_use input", f"{where}.input", "`input` must be JSON text of an object"
            )
    return dict(raw)


def parse_entry(raw: Any, index: int = 0) -> Entry:
    """One script entry → `Reply` or `Fault`.

    Accepted shapes: `{"fault": NAME, "retry_after_ms"?, "after_events"?, "delay_ms"?,
    "content"?}` (content: the reply whose first events stream before a cut);
    a message `{"role": "assistant", "content": [blocks], "stop"?, "usage"?, "delay_ms"?}`;
    or the same with the message under `"message"` (the `model_returned` form). `usage` keys are
    `input`, `output`, `cache_read`, `cache_write` (tokens). Raises `E_INVALID_ARGS` naming
    `script[index]` and the field when the entry is malformed."""
    where = f"script[{index}]"
    if not isinstance(raw, Mapping):
        raise invalid_args("read script entry", where, "each entry is a JSON object (a reply or a fault)")
    delay = _int(raw.get("delay_ms", 0), f"{where}.delay_ms")
    if "fault" in raw:
        name = raw["fault"]
        if name not in FAULTS:
            raise invalid_args("read fault", f"{where}.fault", "use one of: " + ", ".join(FAULTS))
        retry_after = raw.get("retry_after_ms")
        if retry_after is not None:
            retry_after = _int(retry_after, f"{where}.retry_after_ms")
        after = _int(raw.get("after_events", 0), f"{where}.after_events")
        partial = None
        if "content" in raw or "message" in raw:
            partial = _parse_reply(raw, where, delay)
        known = (
            "fault",
            "retry_after_ms",
            "after_events",
            "delay_ms",
            "content",
            "message",
            "role",
            "stop",
            "usage",
        )
        extra = {k: v for k, v in raw.items() if k not in known}
        return Fault(str(name), retry_after, after, delay, partial, extra)
    return _parse_reply(raw, where, delay)


def _parse_reply(raw: Mapping[str, Any], where: str, delay: int) -> Reply:
    msg = raw.get("message", raw)
    if not isinstance(msg, Mapping) or not isinstance(msg.get("content", []), list):
        raise invalid_args("read reply", f"{where}.content", "a reply needs `content`: an array of blocks")
    if msg.get("role", "assistant") != "assistant":
        raise invalid_args("read reply", f"{where}.role", "a scripted reply is an assistant message")
    blocks = tuple(_block(b, f"{where}.content[{i}]") for i, b in enumerate(msg.get("content", [])))
    stop = raw.get("stop")
    if stop is not None and stop not in STOPS:
        raise invalid_args("read reply", f"{where}.stop", "use one of: " + ", ".join(STOPS))
    usage = None
    if raw.get("usage") is not None:
        u = raw["usage"]
        if not isinstance(u, Mapping) or set(u) - set(USAGE_KEYS):
            raise invalid_args(
                "read reply usage", f"{where}.usage", "usage keys are " + ", ".join(USAGE_KEYS)
            )
        usage = Usage(**{k: _int(u.get(k, 0), f"{where}.usage.{k}") for k in USAGE_KEYS})
    return Reply(blocks, stop, usage, delay)


def parse_script(entries: Iterable[Any]) -> list[Entry]:
    """Every entry parsed (see `parse_entry`); `Reply`/`Fault` objects pass through unchanged."""
    out: list[Entry] = []
    for i, raw in enumerate(entries):
        out.append(raw if isinstance(raw, Reply | Fault) else parse_entry(raw, i))
    return out


def load_jsonl(path: str | Path) -> list[Entry]:
    """A JSONL script file (one entry per line, blank lines skipped) → entries.

    Raises `E_INVALID_ARGS` naming the file and 1-based line of a line that is not JSON."""
    raw: list[Any] = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw.append(json.loads(line))
        except ValueError as err:
            raise invalid_args(
                "read script", f"{path}:{n}", f"each line must be one JSON object ({err})"
            ) from None
    return parse_script(raw)


def text(value: str, **kw: Any) -> Reply:
    """A reply with one text block (`kw`: stop, usage, delay_ms)."""
    entry = {"content": [{"kind": "text", "text": value}], **kw}
    return _parse_reply(entry, "text", _int(kw.get("delay_ms", 0), "text.delay_ms"))
