"""Prompt caching as each provider documents it, so the usage the test server answers says how
many prompt tokens a real provider would have served from its cache.

Anthropic (explicit, by `cache_control` breakpoints): the prompt is the blocks in the order
tools → system → messages; a breakpoint caches the prefix through its block. For each breakpoint
the server looks back at most `LOOKBACK_BLOCKS` blocks for the longest prefix cached by an earlier
request: those tokens are read (`cache_read_input_tokens`); the prefixes through the breakpoints
after it are written (`cache_creation_input_tokens`); a prefix shorter than
`ANTHROPIC_MIN_TOKENS` is neither. OpenAI (automatic, by prefix, Chat and Responses alike): a
prompt of at least `OPENAI_MIN_TOKENS` tokens is cached per model and `prompt_cache_key`; a later
prompt reads the longest prefix it shares with one of them, in steps of `OPENAI_STEP` tokens after
the first `OPENAI_MIN_TOKENS` (`prompt_tokens_details.cached_tokens` /
`input_tokens_details.cached_tokens`). Entries never expire (a test runs well inside the
providers' five minutes). Tokens are `TOKEN_BYTES` bytes of compact JSON, as the server's usage
estimate counts them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

TOKEN_BYTES = 4
ANTHROPIC_MIN_TOKENS = 1024
"""The minimum cacheable prompt length of Claude Opus and Sonnet models."""
LOOKBACK_BLOCKS = 20
"""How many blocks before a breakpoint Anthropic checks for an earlier cache entry."""
OPENAI_MIN_TOKENS = 1024
OPENAI_STEP = 128
OPENAI_KEPT = 16
"""Prompts remembered per (model, prompt_cache_key)."""


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


def _uncached(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def anthropic_blocks(body: dict[str, Any]) -> list[tuple[bytes, bool]]:
    """The prompt of a Messages body as `(bytes, carries a breakpoint)` per block, in cache
    order: each tool, each system block, each content block with its message's role."""
    out: list[tuple[bytes, bool]] = []
    for tool in body.get("tools") or []:
        out.append((_dumps(_uncached(tool)), isinstance(tool, dict) and "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str):
        out.append((_dumps({"type": "text", "text": system}), False))
    elif isinstance(system, list):
        for block in system:
            out.append((_dumps(_uncached(block)), isinstance(block, dict) and "cache_control" in block))
    for msg in body.get("messages") or []:
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            marked = isinstance(block, dict) and "cache_control" in block
            out.append((_dumps({"role": msg.get("role"), **_uncached(block)}), marked))
    return out


def openai_prompt(dialect: str, body: dict[str, Any]) -> bytes:
    """The prompt of a Chat or Responses body as one byte string in cache order: the tools,
    then the instructions and the messages / input items."""
    parts = [_dumps(body.get("tools") or [])]
    if dialect == "openai-responses":
        parts.append(_dumps(body.get("instructions") or ""))
        parts += [_dumps(item) for item in body.get("input") or []]
    else:
        parts += [_dumps(msg) for msg in body.get("messages") or []]
    return b"".join(parts)


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` share."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class PromptCache:
    """The cache entries a test server has written (shared by its endpoints)."""

    anthropic: set[bytes] = field(default_factory=set)
    openai: dict[tuple[str, str, str], list[bytes]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def usage(self, dialect: str, body: dict[str, Any], total: int) -> tuple[int, int]:
        """`(cache_read, cache_write)` tokens of a request whose prompt is `total` tokens, and
        the entries it writes recorded (see the module docstring)."""
        with self.lock:
            if dialect == "anthropic":
                read, write = self._anthropic(body)
            else:
                read, write = self._openai(dialect, body), 0
        read = min(read, total)
        return read, min(write, total - read)

    def _anthropic(self, body: dict[str, Any]) -> tuple[int, int]:
        blocks = anthropic_blocks(body)
        digests: list[bytes] = []
        tokens = [0]  # tokens of the prefix of n blocks
        h = hashlib.blake2b(_dumps([body.get("model"), body.get("thinking")]), digest_size=16).digest()
        for raw, _ in blocks:
            h = hashlib.blake2b(h + raw, digest_size=16).digest()
            digests.append(h)
            tokens.append(tokens[-1] + len(raw) // TOKEN_BYTES)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        read_end = 0
        for b in marks:
            for p in range(b, max(-1, b - LOOKBACK_BLOCKS), -1):
                if digests[p] in self.anthropic:
                    read_end = max(read_end, p + 1)
                    break
        write_end = read_end
        for b in marks:
            if b + 1 > read_end and tokens[b + 1] >= ANTHROPIC_MIN_TOKENS:
                self.anthropic.add(digests[b])
                write_end = max(write_end, b + 1)
        return tokens[read_end], tokens[write_end] - tokens[read_end]

    def _openai(self, dialect: str, body: dict[str, Any]) -> int:
        prompt = openai_prompt(dialect, body)
        key = (dialect, str(body.get("model")), str(body.get("prompt_cache_key")))
        seen: Sequence[bytes] = self.openai.get(key, [])
        shared = max((common_prefix(prompt, old) for old in seen), default=0) // TOKEN_BYTES
        if len(prompt) // TOKEN_BYTES >= OPENAI_MIN_TOKENS:
            self.openai[key] = [*seen, prompt][-OPENAI_KEPT:]
        if shared < OPENAI_MIN_TOKENS:
            return 0
        return OPENAI_MIN_TOKENS + (shared - OPENAI_MIN_TOKENS) // OPENAI_STEP * OPENAI_STEP
