"""Pricing hook-up: turns a reply's usage into `billed_usd_micros` (DESIGN.md §3, §8).

The price table and `Price` live with the providers (`runfold.providers.pricing`); this module
adds the workspace's `[prices."<model>"]` overrides from config.toml and the rule
that an unknown price is None — shown as unknown, never as zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.providers.base import Usage
from runfold.providers.pricing import Price as Price
from runfold.providers.pricing import price_of as providers_price_of

PRICE_KEYS: tuple[str, ...] = (
    "input_usd_micros_per_mtok",
    "output_usd_micros_per_mtok",
    "cache_read_usd_micros_per_mtok",
    "cache_write_usd_micros_per_mtok",
)
"""Keys of a `[prices."<model>"]` table: micro-USD per million tokens of each class."""

FREE_MODELS: frozenset[str] = frozenset({"script", "local"})
"""Models known to cost nothing (the scripted model; the embedded local model)."""


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


def price_of(model: str, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """The price of `model`: the workspace override, else the providers' table, else free for
    the scripted/local models, else None (unknown)."""
    if overrides and model in overrides:
        return overrides[model]
    found = providers_price_of(model)
    if found is not None:
        return found
    if model in FREE_MODELS or model.startswith("script"):
        return Price(0, 0, 0, 0)
    return None


def make_bill(overrides: Mapping[str, Price] | None = None) -> Callable[[str, Usage], int | None]:
    """`bill(model, usage) -> micro-USD | None` for the run loop: overrides first, then the
    providers' `billed_usd_micros`, then `price_of`; None when the price is unknown."""

    def bill(model: str, usage: Usage) -> int | None:
        price = price_of(model, overrides)
        return None if price is None else price.cost(usage)

    return bill
