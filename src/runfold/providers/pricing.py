"""Model prices and the cost of one call in integer micro-USD (DESIGN.md §8).

A price is micro-USD per million tokens for each token class (input, output, cache read, cache
write), so a call's cost is exact integer arithmetic and `model_returned.billed_usd_micros` stays
float-free. Unknown models cost `None` ("unknown"), never 0; the embedded and scripted models are
free and known. Rates are the providers' published list prices, looked up on 2026-11-30
(Anthropic: platform.claude.com pricing page, 5-minute cache writes; OpenAI: the API pricing
page, where cache writes are billed as plain input). The workspace's `[prices."<model>"]`
overrides are applied on top by `runtime/pricing.py`, which calls `price_of`/`billed_usd_micros`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from runfold.providers.base import Usage

PER = 1_000_000
"""Prices are per this many tokens."""
USD = 1_000_000
"""micro-USD per USD."""


@dataclass(frozen=True)
class Price:
    """micro-USD per million tokens of each class (3_000_000 = $3 / MTok)."""

    input: int
    output: int
    cache_read: int
    cache_write: int

    def cost(self, usage: Usage) -> int:
        """The cost of `usage` in micro-USD, rounded half up once over the whole call."""
        total = (
            usage.input * self.input
            + usage.output * self.output
            + usage.cache_read * self.cache_read
            + usage.cache_write * self.cache_write
        )
        return (total + PER // 2) // PER

    def cache_savings(self, usage: Usage) -> int:
        """micro-USD saved by reading `usage.cache_read` tokens from the cache instead of paying
        them as input, less what cache writes cost above input (can be negative)."""
        saved = usage.cache_read * (self.input - self.cache_read) - usage.cache_write * (
            self.cache_write - self.input
        )
        return saved // PER


def _usd(input: float, output: float, cache_read: float, cache_write: float) -> Price:
    return Price(*(round(v * USD) for v in (input, output, cache_read, cache_write)))


def _openai(input: float, cached: float, output: float) -> Price:
    return _usd(input, output, cached, input)


FREE = Price(0, 0, 0, 0)

PRICES: Mapping[str, Price] = {
    # Anthropic: input, output, cache read, 5-minute cache write (USD / MTok)
    "claude-opus-5": _usd(5, 25, 0.50, 6.25),
    "claude-sonnet-5": _usd(2, 10, 0.20, 2.50),
    "claude-opus-4-8": _usd(5, 25, 0.50, 6.25),
    "claude-opus-4-7": _usd(5, 25, 0.50, 6.25),
    "claude-opus-4-6": _usd(5, 25, 0.50, 6.25),
    "claude-opus-4-5": _usd(5, 25, 0.50, 6.25),
    "claude-opus-4-1": _usd(15, 75, 1.50, 18.75),
    "claude-opus-4-0": _usd(15, 75, 1.50, 18.75),
    "claude-opus-4": _usd(15, 75, 1.50, 18.75),
    "claude-sonnet-4-6": _usd(3, 15, 0.30, 3.75),
    "claude-sonnet-4-5": _usd(3, 15, 0.30, 3.75),
    "claude-sonnet-4-0": _usd(3, 15, 0.30, 3.75),
    "claude-sonnet-4": _usd(3, 15, 0.30, 3.75),
    "claude-3-7-sonnet": _usd(3, 15, 0.30, 3.75),
    "claude-haiku-4-5": _usd(1, 5, 0.10, 1.25),
    "claude-3-5-haiku": _usd(0.80, 4, 0.08, 1),
    # OpenAI: input, cached input, output (USD / MTok)
    "gpt-5": _openai(1.25, 0.125, 10),
    "gpt-5-mini": _openai(0.25, 0.025, 2),
    "gpt-5-nano": _openai(0.05, 0.005, 0.40),
    "gpt-5.1": _openai(1.25, 0.125, 10),
    "gpt-4.1": _openai(2, 0.50, 8),
    "gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "gpt-4o": _openai(2.50, 1.25, 10),
    "gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "o1": _openai(15, 7.50, 60),
    "o3": _openai(2, 0.50, 8),
    "o3-mini": _openai(1.10, 0.55, 4.40),
    "o4-mini": _openai(1.10, 0.275, 4.40),
    # free and known: the embedded model and the scripted model
    "smollm2-135m-instruct": FREE,
    "script": FREE,
}
"""The built-in table, keyed by the provider's model name (dated snapshots resolve to it)."""

_SNAPSHOT = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


def price_of(model: str, table: Mapping[str, Price] | None = None) -> Price | None:
    """The price of `model` in `table` (default: the built-in `PRICES`): the exact name first,
    then without a dated-snapshot or `-latest` suffix (`claude-sonnet-4-5-20250929` →
    `claude-sonnet-4-5`, `gpt-4o-2024-08-06` → `gpt-4o`). None when unknown; no other prefix
    matching (`gpt-5.4` is not `gpt-5`)."""
    prices = PRICES if table is None else table
    found = prices.get(model)
    if found is None:
        found = prices.get(_SNAPSHOT.sub("", model))
    return found


def billed_usd_micros(model: str, usage: Usage, table: Mapping[str, Price] | None = None) -> int | None:
    """The cost of one call in micro-USD (see `Price.cost`); None when the model's price is
    unknown — never 0 for an unknown model."""
    price = price_of(model, table)
    return None if price is None else price.cost(usage)
