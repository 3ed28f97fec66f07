"""The cost fold: tokens and micro-USD by run, by model and by tool, with prompt-cache savings.

It reads `model_returned.usage` / `billed_usd_micros` (and the model of the `model_called` before
each reply) and `tool_called`/`tool_result` lines. An unknown price stays unknown (None), never
zero: a total that includes one unknown-priced reply is unknown too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from runfold.core.canonical import encode_json
from runfold.core.kinds import Kind
from runfold.core.payloads import ModelCalled, ModelReturned, ToolResult
from runfold.core.records import Record
from runfold.providers.base import Usage
from runfold.runtime.pricing import Price


@dataclass
class CostRow:
    """Totals for one run or one model: `calls` (replies), token `usage`, `billed_usd_micros`
    (None when any reply's price is unknown) and `cache_savings_usd_micros` (what cache reads saved
    against the input price; None when the price is unknown)."""

    key: str
    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    billed_usd_micros: int | None = 0
    cache_savings_usd_micros: int | None = 0
    models: set[str] = field(default_factory=set)

    def add(self, model: str, usage: Usage, billed: int | None, saved: int | None) -> None:
        self.calls += 1
        self.models.add(model)
        self.usage = Usage(
            self.usage.input + usage.input,
            self.usage.output + usage.output,
            self.usage.cache_read + usage.cache_read,
            self.usage.cache_write + usage.cache_write,
        )
        self.billed_usd_micros = (
            None if billed is None or self.billed_usd_micros is None else self.billed_usd_micros + billed
        )
        self.cache_savings_usd_micros = (
            None
            if saved is None or self.cache_savings_usd_micros is None
            else self.cache_savings_usd_micros + saved
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


def _usage_of(data: object) -> Usage:
    if not isinstance(data, dict):
        return Usage()

    def n(key: str) -> int:
        v = data.get(key, 0)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0

    return Usage(n("input"), n("output"), n("cache_read"), n("cache_write"))


def cost_report(records: Iterable[Record], price_of: Callable[[str], Price | None]) -> CostReport:
    """The cost of every run among `records` (ledger order). `price_of(model)` gives the price
    used for cache savings (and for replies that recorded no `billed_usd_micros`)."""
    runs: dict[str, CostRow] = {}
    models: dict[str, CostRow] = {}
    tools: dict[str, ToolRow] = {}
    total = CostRow("total")
    last_model: dict[str, str] = {}
    for rec in records:
        if not rec.known:
            continue
        kind = rec.kind
        if kind is Kind.MODEL_CALLED:
            last_model[rec.run] = rec.typed(ModelCalled).model
        elif kind is Kind.MODEL_RETURNED:
            ret = rec.typed(ModelReturned)
            model = last_model.get(rec.run, "unknown")
            usage = _usage_of(ret.usage)
            price = price_of(model)
            billed = ret.billed_usd_micros
            if billed is None and price is not None:
                billed = price.cost(usage)
            saved = price.cache_savings(usage) if price is not None else None
            for row in (
                runs.setdefault(rec.run, CostRow(rec.run)),
                models.setdefault(model, CostRow(model)),
                total,
            ):
                row.add(model, usage, billed, saved)
        elif kind is Kind.TOOL_RESULT:
            res = rec.typed(ToolResult)
            row_t = tools.setdefault(res.name, ToolRow(res.name))
            row_t.calls += 1
            row_t.errors += 1 if res.error is not None else 0
            row_t.took_us += res.took_us or 0
            body = res.error if res.error is not None else (res.result or {})
            row_t.result_bytes += len(encode_json(body))
    return CostReport(list(runs.values()), list(models.values()), list(tools.values()), total)
