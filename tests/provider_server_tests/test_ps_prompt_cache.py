"""The provider test server's prompt cache (`provider_server.cache`): the usage it answers reads
and writes the cache as each provider documents it — Anthropic by `cache_control` breakpoints
with a 20-block lookback and a minimum length, OpenAI by prefix in 128-token steps after the first
1024 — and a run through the official SDKs records those figures in the ledger (a server asked
for `prompt_cache`); scripted usage still wins, and without `prompt_cache` nothing is cached."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from provider_server import ProviderServer
from provider_server.cache import (
    ANTHROPIC_MIN_TOKENS,
    OPENAI_MIN_TOKENS,
    OPENAI_STEP,
    TOKEN_BYTES,
    PromptCache,
    anthropic_blocks,
)
from runfold.api import Workspace

MARK = {"type": "ephemeral"}


def text(n_tokens: int, tag: str = "x") -> str:
    """A text whose block is about `n_tokens` tokens."""
    return tag * (n_tokens * TOKEN_BYTES)


def messages_body(*blocks: dict[str, Any], system: str = "be brief", mark_system: bool = True) -> dict[str, Any]:
    sys_block: dict[str, Any] = {"type": "text", "text": system}
    if mark_system:
        sys_block["cache_control"] = MARK
    return {"model": "m", "max_tokens": 10, "system": [sys_block], "messages": [{"role": "user", "content": list(blocks)}]}


def tokens_through(body: dict[str, Any], n_blocks: int) -> int:
    return sum(len(raw) // TOKEN_BYTES for raw, _ in anthropic_blocks(body)[:n_blocks])


def test_anthropic_reads_the_prefix_an_earlier_breakpoint_wrote_and_writes_the_new_tail() -> None:
    cache = PromptCache()
    first = messages_body({"type": "text", "text": text(1500)}, {"type": "text", "text": "q1", "cache_control": MARK})
    read, write = cache.usage("anthropic", first, 10_000)
    assert (read, write) == (0, tokens_through(first, 3))
    grown = messages_body(
        {"type": "text", "text": text(1500)},
        {"type": "text", "text": "q1"},
        {"type": "text", "text": text(300, "y")},
        {"type": "text", "text": "q2", "cache_control": MARK},
    )
    read, write = cache.usage("anthropic", grown, 10_000)
    assert read == tokens_through(grown, 3)  # the old tail breakpoint's prefix, found by lookback
    assert write == tokens_through(grown, 5) - read
    assert cache.usage("anthropic", grown, 10_000) == (tokens_through(grown, 5), 0)


def test_anthropic_caches_nothing_below_the_minimum_or_when_the_prefix_changed() -> None:
    cache = PromptCache()
    small = messages_body({"type": "text", "text": text(ANTHROPIC_MIN_TOKENS // 2), "cache_control": MARK})
    assert cache.usage("anthropic", small, 10_000) == (0, 0)
    assert cache.usage("anthropic", small, 10_000) == (0, 0)
    big = messages_body({"type": "text", "text": text(2000), "cache_control": MARK})
    assert cache.usage("anthropic", big, 10_000)[0] == 0
    assert cache.usage("anthropic", big, 10_000)[0] > 0
    moved = messages_body({"type": "text", "text": text(2000), "cache_control": MARK}, system="changed")
    assert cache.usage("anthropic", moved, 10_000)[0] == 0  # a byte earlier in the prefix changed


def test_anthropic_lookback_is_twenty_blocks() -> None:
    cache = PromptCache()
    head = [{"type": "text", "text": text(1200)}]
    cache.usage("anthropic", messages_body(*head, {"type": "text", "text": "a", "cache_control": MARK}), 10**6)
    near = [*head, {"type": "text", "text": "a"}, *({"type": "text", "text": f"b{i}"} for i in range(18))]
    assert cache.usage("anthropic", messages_body(*near, {"type": "text", "text": "end", "cache_control": MARK}), 10**6)[0] > 0
    cache = PromptCache()
    cache.usage("anthropic", messages_body(*head, {"type": "text", "text": "a", "cache_control": MARK}), 10**6)
    far = [*head, {"type": "text", "text": "a"}, *({"type": "text", "text": f"b{i}"} for i in range(25))]
    body = messages_body(*far, {"type": "text", "text": "end", "cache_control": MARK}, mark_system=False)
    assert cache.usage("anthropic", body, 10**6)[0] == 0


@pytest.mark.parametrize("dialect", ["openai-chat", "openai-responses"])
def test_openai_reads_the_shared_prefix_in_128_token_steps_after_1024(dialect: str) -> None:
    def body(*texts: str, key: str = "k") -> dict[str, Any]:
        if dialect == "openai-chat":
            return {"model": "m", "messages": [{"role": "user", "content": t} for t in texts], "prompt_cache_key": key}
        return {"model": "m", "input": [{"type": "message", "role": "user", "content": t} for t in texts], "prompt_cache_key": key}

    cache = PromptCache()
    assert cache.usage(dialect, body(text(700)), 10**6) == (0, 0)
    assert cache.usage(dialect, body(text(700), text(100, "y")), 10**6) == (0, 0)  # shares < 1024 tokens
    first = body(text(1500))
    assert cache.usage(dialect, first, 10**6) == (0, 0)
    read, write = cache.usage(dialect, body(text(1500), text(400, "y")), 10**6)
    assert write == 0 and read >= OPENAI_MIN_TOKENS and (read - OPENAI_MIN_TOKENS) % OPENAI_STEP == 0
    assert 1500 - OPENAI_STEP < read <= 1500 + 8
    assert cache.usage(dialect, body(text(1500), key="other"), 10**6) == (0, 0)


def _read(cid: str, path: str) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": "read_file", "input": json.dumps({"path": path})}


@pytest.mark.parametrize("dialect", ["anthropic", "openai-chat", "openai-responses"])
def test_a_run_through_the_sdk_records_the_cache_reads_the_server_computed(tmp_path: Path, dialect: str) -> None:
    pytest.importorskip("anthropic" if dialect == "anthropic" else "openai")
    ws = Workspace.init(tmp_path / "ws")
    for i in range(4):
        (tmp_path / "ws" / f"f{i}.txt").write_text(f"part {i} " * 800)
    script = [{"content": [_read(f"c{i}", f"f{i}.txt")]} for i in range(4)]
    script.append({"content": [{"kind": "text", "text": "done"}], "usage": {"input": 7, "output": 1}})
    with ProviderServer(script, prompt_cache=True) as server:
        out = ws.run("read the parts", model=server.provider(dialect), builtin_tools=["read_file"])
    assert out.completion == "done", out.reason
    usages = [r.env.data["usage"] for r in ws.records(run=out.run_id) if r.kind_name == "model_returned"]
    ws.close()
    assert usages[-1] == {"input": 7, "output": 1, "cache_read": 0, "cache_write": 0}  # scripted wins
    reads = [u["cache_read"] for u in usages[:-1]]
    assert reads[0] == 0 and all(b > a for a, b in itertools.pairwise(reads[1:])), usages
    assert reads[-1] > 0
    if dialect == "anthropic":
        assert any(u["cache_write"] > 0 for u in usages)  # a prefix past the minimum was written
    else:
        assert all((r - OPENAI_MIN_TOKENS) % OPENAI_STEP == 0 for r in reads if r)


def test_without_prompt_cache_the_usage_reads_nothing(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    (tmp_path / "ws" / "f0.txt").write_text("part " * 4000)
    script = [{"content": [_read("c0", "f0.txt")]}, {"content": [{"kind": "text", "text": "done"}]}]
    with ProviderServer(script) as server:
        out = ws.run("read it", model=server.provider("anthropic"), builtin_tools=["read_file"])
    usages = [r.env.data["usage"] for r in ws.records(run=out.run_id) if r.kind_name == "model_returned"]
    ws.close()
    assert all(u["cache_read"] == u["cache_write"] == 0 for u in usages)
