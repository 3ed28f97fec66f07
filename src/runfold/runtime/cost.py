"""The cost report: tokens and micro-USD by run, by model and by tool, with prompt-cache savings.

It is a view of the runs fold (`core.fold.runs.RunTally`, the same tally `runfold runs` and a
run's outcome read), priced by `TablePricing` — the workspace's `[prices."<model>"]` overrides,
then the providers' table. An unknown price stays unknown (None), never zero: a total that
includes one unknown-priced reply is unknown too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from runfold.core.fold.runs import Tally, ToolTally, run_summaries
from runfold.core.records import Record
from runfold.providers.base import Usage
from runfold.runtime.pricing import Price, price_of


def usage_of(tokens: Mapping[str, int]) -> Usage:
    """A count per `TOKEN_KEYS` (as the runs fold sums them) as a provider `Usage`."""
    return Usage(tokens["input"], tokens["output"], tokens["cache_read"], tokens["cache_write"])


@dataclass(frozen=True)
class TablePricing:
    """The runs fold's `Pricing` from `price_of(model)` (a `Price` or None when unknown), e.g.
    `lambda model: runtime.pricing.price_of(model, overrides)`."""

    price_of: Callable[[str], Price | None]

    def cost(self, model: str, tokens: Mapping[str, int]) -> int | None:
        price = self.price_of(model)
        return None if price is None else price.cost(usage_of(tokens))

    def cache_savings(self, model: str, tokens: Mapping[str, int]) -> int | None:
        price = self.price_of(model)
        return None if price is None else price.cache_savings(usage_of(tokens))


def workspace_pricing(prices: Mapping[str, Price] | None) -> TablePricing:
    """The pricing of a workspace: its checked `[prices."<model>"]` overrides of config.toml
    (`WorkspaceConfig.prices`; None or empty: none), then the providers' table (see
    `runtime.pricing.price_of`)."""
    overrides = dict(prices) if prices else None
    return TablePricing(lambda model: price_of(model, overrides))


@dataclass
class CostRow:
    """Totals for one run or one model: `calls` (replies), token `usage`, `billed_usd_micros`
    (None when any reply's price is unknown) and `cache_savings_usd_micros` (what cache reads saved
    against the input price; None when the price is unknown); `usage_known` is False when a reply
    recorded no token usage."""

    key: str
    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    billed_usd_micros: int | None = 0
    cache_savings_usd_micros: int | None = 0
    models: set[str] = field(default_factory=set)
    usage_known: bool = True

    @classmethod
    def of(cls, key: str, tally: Tally) -> CostRow:
        return cls(
            key,
            tally.replies,
            usage_of(tally.tokens),
            tally.cost_usd_micros,
            tally.cache_savings_usd_micros,
            set(tally.models),
            tally.tokens_known,
        )


@dataclass
class ToolRow:
    """One tool: `calls` (results), `errors`, total `took_us` (µs) and `result_bytes` (bytes of
    the compact JSON results/errors the model read)."""

    name: str
    calls: int = 0
    errors: int = 0
    took_us: int = 0
    result_bytes: int = 0


@dataclass
class CostReport:
    """`runs` and `models` (CostRow each, in first-seen order), `tools` (ToolRow), `total`."""

    runs: list[CostRow]
    models: list[CostRow]
    tools: list[ToolRow]
    total: CostRow


def cost_report(records: Iterable[Record], price_of: Callable[[str], Price | None]) -> CostReport:
    """The cost of every run among `records` (ledger order): the runs fold's tallies merged by
    run, model and tool, ordered by first reply (first result for tools). `price_of(model)` prices
    replies that recorded no `billed_usd_micros` and gives the cache savings."""
    runs: list[tuple[str, Tally]] = []
    models: dict[str, Tally] = {}
    tools: dict[str, ToolTally] = {}
    total = Tally()
    for summary in run_summaries(records, TablePricing(price_of)):
        tally = summary.tally
        if tally.replies.replies:
            runs.append((summary.run, tally.replies))
        total.add(tally.replies)
        for model, per_model in tally.by_model.items():
            models.setdefault(model, Tally()).add(per_model)
        for name, per_tool in tally.tools.items():
            tools.setdefault(name, ToolTally(name)).add(per_tool)
    return CostReport(
        [CostRow.of(run, t) for run, t in sorted(runs, key=lambda r: r[1].first_seq)],
        [CostRow.of(m, t) for m, t in sorted(models.items(), key=lambda m: m[1].first_seq)],
        [
            ToolRow(t.name, t.calls, t.errors, t.took_us, t.result_bytes)
            for t in sorted(tools.values(), key=lambda t: t.first_seq)
        ],
        CostRow.of("total", total),
    )
