"""How numbers are shown to a person: counts with thousands separators and micro-USD as dollars.

Every human-readable output (the live view, summaries, `runs`, `tree`, `cost`, `verify`, `log`)
formats through these two functions, so one figure never reads two ways; `--json` keeps the
plain integers.
"""

from __future__ import annotations

MICROS_PER_USD = 1_000_000


def count(n: int) -> str:
    """A whole number with thousands separators: `1000000` → `1,000,000`, `-5` → `-5`."""
    return f"{n:,}"


def usd(micros: int | None) -> str:
    """Micro-USD as dollars: `$0` for nothing billed (a free model), else the exact amount with
    trailing zeros dropped down to cents (`$1.50`, `$0.001234`, `$12.345678`, `-$0.000005`);
    `unknown` for None (no known price), never `$0`."""
    if micros is None:
        return "unknown"
    if micros == 0:
        return "$0"
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), MICROS_PER_USD)
    cents = f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${count(whole)}.{cents}"
