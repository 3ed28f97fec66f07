"""Pricing hook-up: turns a reply's usage into `billed_usd_micros` (DESIGN.md §3, §8).

The price table itself lives with the providers (`runfold.providers.pricing`, when installed);
this module adds the workspace's `[prices."<model>"]` overrides from config.toml and the rule
that an unknown price is None — shown as unknown, never as zero.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.providers.base import Usage

PRICE_KEYS: tuple[str, ...] = (
    "input_usd_micros_per_mtok",
    "output_usd_micros_per_mtok",
    "cache_read_usd_micros_per_mtok",
    "cache_write_usd_micros_per_mtok",
)
"""Keys of a `[prices."<model>"]` table: micro-USD per million tokens of each class."""

FREE_MODELS: frozenset[str] = frozenset({"script", "local"})
"""Models known to cost nothing (the scripted model; the embedded local model)."""


@dataclass(frozen=True)
class Price:
    """Micro-USD per million tokens per token class (input, output, cache read, cache write)."""

    input: int
    output: int
    cache_read: int
    cache_write: int

    def bill(self, usage: Usage) -> int:
        """The cost of `usage` in micro-USD, rounded half up."""
        total = (
            usage.input * self.input
            + usage.output * self.output
            + usage.cache_read * self.cache_read
            + usage.cache_write * self.cache_write
        )
        return (total + 500_000) // 1_000_000

    def cache_savings(self, usage: Usage) -> int:
        """Micro-USD saved by reading `usage.cache_read` tokens from the cache instead of paying
        them as input (can be negative when cache writes cost more than they saved)."""
        saved = usage.cache_read * (self.input - self.cache_read) - usage.cache_write * (
            self.cache_write - self.input
        )
        return saved // 1_000_000


def parse_prices(table: Mapping[str, Any], where: str = "config.toml [prices]") -> dict[str, Price]:
    """`[prices."<model>"]` tables → `Price` per model. A missing key means the class costs the
    input price (cache classes) or is refused (input/output). Raises `E_CONFIG_INVALID` naming
    the key."""
    out: dict[str, Price] = {}
    for model, row in table.items():
        if not isinstance(row, Mapping):
            raise _bad(f'{where}."{model}"', "give a table of micro-USD per million tokens")
        vals: dict[str, int] = {}
        for key in PRICE_KEYS:
            v = row.get(key)
            if v is None and key.startswith("cache") and "input_usd_micros_per_mtok" in row:
                v = row["input_usd_micros_per_mtok"]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise _bad(
                    f'{where}."{model}".{key}', "give a whole number of micro-USD per million tokens ≥ 0"
                )
            vals[key] = v
        unknown = set(row) - set(PRICE_KEYS)
        if unknown:
            raise _bad(f'{where}."{model}".{sorted(unknown)[0]}', "use only: " + ", ".join(PRICE_KEYS))
        out[str(model)] = Price(
            vals["input_usd_micros_per_mtok"],
            vals["output_usd_micros_per_mtok"],
            vals["cache_read_usd_micros_per_mtok"],
            vals["cache_write_usd_micros_per_mtok"],
        )
    return out


def _bad(key: str, recovery: str) -> RunfoldError:
    return RunfoldError(ErrorCode.CONFIG_INVALID, "read the price table", key, recovery)


def _provider_table() -> Callable[[str, Usage], int | None] | None:
    try:
        mod = importlib.import_module("runfold.providers.pricing")
    except ImportError:
        return None
    fn = getattr(mod, "billed_usd_micros", None)
    return fn if callable(fn) else None


def _provider_price(model: str) -> Price | None:
    try:
        mod = importlib.import_module("runfold.providers.pricing")
    except ImportError:
        return None
    fn = getattr(mod, "price_of", None)
    if not callable(fn):
        return None
    found = fn(model)
    if found is None:
        return None
    if isinstance(found, Price):
        return found
    try:
        return Price(int(found.input), int(found.output), int(found.cache_read), int(found.cache_write))
    except (AttributeError, TypeError, ValueError):
        return None


def price_of(model: str, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """The price of `model`: the workspace override, else the providers' table, else free for
    the scripted/local models, else None (unknown)."""
    if overrides and model in overrides:
        return overrides[model]
    found = _provider_price(model)
    if found is not None:
        return found
    if model in FREE_MODELS or model.startswith("script"):
        return Price(0, 0, 0, 0)
    return None


def make_bill(overrides: Mapping[str, Price] | None = None) -> Callable[[str, Usage], int | None]:
    """`bill(model, usage) -> micro-USD | None` for the run loop: overrides first, then the
    providers' `billed_usd_micros`, then `price_of`; None when the price is unknown."""
    table = _provider_table()

    def bill(model: str, usage: Usage) -> int | None:
        if overrides and model in overrides:
            return overrides[model].bill(usage)
        if table is not None:
            billed = table(model, usage)
            if billed is not None:
                return billed
        price = price_of(model)
        return None if price is None else price.bill(usage)

    return bill
