"""The scripted model: plays back a JSONL file of replies in the internal message form.

It makes runs deterministic for tests, demos and benchmarks while the run loop treats it exactly
like a real provider: the request is rendered in the script's dialect, validated and hashed, and
the exact bytes are handed over. Faults (429, 500, a cut stream, a refusal) can be injected to
exercise retries; the entry format is the provider test server's, so one script drives both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.messages import Block, check_block
from runfold.core.render import DIALECTS
from runfold.providers.base import (
    CALL_SETTING_KEYS,
    CallSettings,
    ProviderError,
    Reply,
    Request,
    StreamCallback,
    Usage,
)

SCRIPT_MODEL = "script"
"""The model name a scripted provider records in `model_called.model` unless one is given."""

FAULTS: dict[str, tuple[int | None, bool]] = {
    "http_429": (429, True),
    "http_500": (500, True),
    "http_529": (529, True),
    "http_400_refusal": (400, False),
    "cut_stream": (None, True),
    "stream_error": (None, True),
}
"""Injectable faults → (HTTP status or None, retryable); the provider test server's names."""

STOPS = ("end_turn", "tool_use", "max_tokens", "refusal")
USAGE_KEYS = ("input", "output", "cache_read", "cache_write")


@dataclass(frozen=True)
class ScriptEntry:
    """One scripted answer: a reply (`blocks`, `stop`, `usage`) or a `fault`; `delay_ms` is
    waited before answering (cancellable)."""

    blocks: tuple[Block, ...] = ()
    stop: str | None = None
    usage: Usage | None = None
    delay_ms: int = 0
    fault: str | None = None
    retry_after_ms: int | None = None


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_args("read script entry", where, "use an integer ≥ 0")
    return value


def parse_entry(raw: Any, where: str = "script[0]") -> ScriptEntry:
    """One JSONL entry → `ScriptEntry`.

    Shapes: `{"content": [blocks], "stop"?, "usage"?: {input, output, cache_read, cache_write},
    "delay_ms"?}` (also with the message under `"message"`, the `model_returned` form), or
    `{"fault": "http_429"|"http_500"|"http_529"|"http_400_refusal"|"cut_stream"|"stream_error",
    "retry_after_ms"?, "delay_ms"?}`. A `tool_use` block's `input` is the arguments' JSON text (an
    object is accepted and written as compact JSON). Raises `E_INVALID_ARGS` naming `where` and
    the field.
    """
    if not isinstance(raw, Mapping):
        raise invalid_args("read script entry", where, "each line is a JSON object: a reply or a fault")
    delay = _int(raw.get("delay_ms", 0), f"{where}.delay_ms")
    if "fault" in raw:
        name = raw["fault"]
        if name not in FAULTS:
            raise invalid_args(
                f"read fault {name!r}", f"{where}.fault", "use one of: " + ", ".join(FAULTS), tuple(FAULTS)
            )
        after = raw.get("retry_after_ms")
        return ScriptEntry(
            delay_ms=delay,
            fault=str(name),
            retry_after_ms=None if after is None else _int(after, f"{where}.retry_after_ms"),
        )
    msg = raw.get("message", raw)
    content = msg.get("content") if isinstance(msg, Mapping) else None
    if not isinstance(content, list):
        raise invalid_args("read reply", f"{where}.content", "a reply needs `content`: an array of blocks")
    blocks: list[Block] = []
    for i, b in enumerate(content):
        path = f"{where}.content[{i}]"
        if isinstance(b, dict) and b.get("kind") == "tool_use" and not isinstance(b.get("input", ""), str):
            b = {**b, "input": orjson.dumps(b["input"]).decode("utf-8")}  # an object: its compact JSON text
        block = check_block(b, path).copy()
        if block["kind"] == "tool_result":
            raise invalid_args("read reply block", path, "a model reply holds no tool_result blocks")
        blocks.append(block)
    stop = raw.get("stop")
    if stop is not None and stop not in STOPS:
        raise invalid_args("read reply", f"{where}.stop", "use one of: " + ", ".join(STOPS), STOPS)
    usage = None
    if raw.get("usage") is not None:
        u = raw["usage"]
        if not isinstance(u, Mapping) or set(u) - set(USAGE_KEYS):
            raise invalid_args(
                "read reply usage", f"{where}.usage", "usage keys are " + ", ".join(USAGE_KEYS)
            )
        usage = Usage(**{k: _int(u.get(k, 0), f"{where}.usage.{k}") for k in USAGE_KEYS})
    return ScriptEntry(tuple(blocks), stop, usage, delay)


def load_script(path: Path) -> list[ScriptEntry]:
    """Every entry of a JSONL script file (blank lines skipped). Raises `E_PATH_NOT_FOUND` when
    the file is missing, `E_INVALID_ARGS` naming `<file>:<line>` for a malformed line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunfoldError(
            ErrorCode.PATH_NOT_FOUND,
            "read the model script",
            str(path),
            "give the path of a JSONL file of replies (`script:<file>`)",
        ) from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise invalid_args("read script line", where, f"each line is one JSON object ({exc})") from None
        if isinstance(raw, dict) and "recorded" in raw:
            continue  # a recording's header (providers/recording.py), read by `from_file`
        out.append(parse_entry(raw, where))
    return out


@dataclass
class ScriptedProvider:
    """A `Provider` answering from a script, in order (see the module docstring).

    `entries`: parsed entries or raw JSON objects; `dialect`: the dialect requests are rendered
    in (default `anthropic`); `model`: recorded as `model_called.model`. `requests` keeps every
    request received (bodies and exact bytes) when `keep_requests` (tests; off for script files,
    whose sessions may be long). `settings`: the call settings the run loop renders with.

    `complete` raises `ProviderError` for an injected fault (status and retryability of the
    fault) and, non-retryable, when the script has no reply left.
    """

    entries: Sequence[ScriptEntry | Mapping[str, Any]] = ()
    dialect: str = "anthropic"
    model: str = SCRIPT_MODEL
    source: str = "the script"
    settings: CallSettings = field(default_factory=CallSettings)
    keep_requests: bool = True
    requests: list[Request] = field(default_factory=list)
    _entries: list[ScriptEntry] = field(default_factory=list, init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.dialect not in DIALECTS:
            raise invalid_args(
                "use scripted model",
                f"dialect {self.dialect!r}",
                "use one of: " + ", ".join(DIALECTS),
                DIALECTS,
            )
        self._entries = [
            e if isinstance(e, ScriptEntry) else parse_entry(e, f"script[{i}]")
            for i, e in enumerate(self.entries)
        ]

    @classmethod
    def from_file(
        cls, path: Path, *, dialect: str | None = None, model: str | None = None, **settings: Any
    ) -> ScriptedProvider:
        """A scripted provider over the JSONL file at `path` (see `load_script` for errors).

        A recording made with `--record` (providers/recording.py) starts with a header of the
        dialect, model and call settings it was rendered with; they are the defaults here, so the
        replayed run sends the same request bytes. Without one: `anthropic`, model `script`."""
        from runfold.providers.recording import read_header

        header = read_header(Path(path)) or {}
        unknown = sorted(set(settings) - set(CALL_SETTING_KEYS))
        if unknown:
            raise TypeError(f"from_file() got unexpected settings {', '.join(unknown)}")
        return cls(
            load_script(path),
            dialect=dialect or header.get("dialect") or "anthropic",
            model=model or header.get("model") or SCRIPT_MODEL,
            source=str(path),
            settings=CallSettings.from_data(settings, CallSettings.from_data(header)),
            keep_requests=False,
        )

    @classmethod
    def of(cls, entries: Iterable[Mapping[str, Any]], **kwargs: Any) -> ScriptedProvider:
        """A scripted provider over raw JSON entries (tests and examples)."""
        return cls(list(entries), **kwargs)

    @property
    def used(self) -> int:
        """How many entries were consumed."""
        return self._next

    @property
    def remaining(self) -> int:
        return len(self._entries) - self._next

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        """Answer with the next entry (see the class docstring)."""
        start = time.perf_counter_ns()
        if self.keep_requests:
            self.requests.append(request)
        if self._next >= len(self._entries):
            raise ProviderError(
                f"{self.source} has no reply left after {len(self._entries)} entries",
                status=None,
                retryable=False,
                subject=self.source,
            )
        entry = self._entries[self._next]
        self._next += 1
        if entry.delay_ms:
            await asyncio.sleep(entry.delay_ms / 1000)
        if entry.fault is not None:
            status, retryable = FAULTS[entry.fault]
            raise ProviderError(
                f"scripted fault {entry.fault}",
                status=status,
                retryable=retryable,
                retry_after_ms=entry.retry_after_ms,
                subject=self.source,
            )
        first = (time.perf_counter_ns() - start) // 1000
        if on_delta is not None:
            for b in entry.blocks:
                if b["kind"] == "text":
                    res = on_delta("text", b["text"])
                    if res is not None:
                        await res
        stop = entry.stop or (
            "tool_use" if any(b["kind"] == "tool_use" for b in entry.blocks) else "end_turn"
        )
        usage = entry.usage or Usage(input=len(request.body_bytes) // 4, output=_estimate(entry.blocks))
        return Reply(
            blocks=[b.copy() for b in entry.blocks],
            stop=stop,
            usage=usage,
            first_byte_us=first,
            took_us=(time.perf_counter_ns() - start) // 1000,
        )

    async def aclose(self) -> None:
        return None


def _estimate(blocks: Sequence[Block]) -> int:
    """Output tokens estimated as bytes / 4 of the reply's JSON (a script rarely states usage)."""
    return max(1, len(orjson.dumps(list(blocks))) // 4) if blocks else 0
