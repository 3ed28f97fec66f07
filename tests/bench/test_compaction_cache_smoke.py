"""Smoke test of bench/compaction.py's prompt-cache pass: a run through the official SDK against
the provider test server compacts, and the shares come from the usage the server computed and the
ledger recorded (a long prefix is read from the cache between compactions)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bench_scripts import load_bench


@pytest.mark.parametrize("dialect", ["anthropic", "openai-chat"])
def test_the_cache_pass_reads_the_shares_from_the_servers_usage(tmp_path: Path, dialect: str) -> None:
    pytest.importorskip("anthropic" if dialect == "anthropic" else "openai")
    bench = load_bench("compaction")
    shares = asyncio.run(bench.measure_cache(60, tmp_path / "ws", dialect))
    assert shares["compactions"] >= 1 and shares["requests"] >= 61
    assert 500 < shares["others"] <= 1000 and 500 < shares["before"] <= 1000
    assert 0 <= shares["at"] < shares["before"]  # a compaction rewrites part of the prefix
