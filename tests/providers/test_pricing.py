"""The price table: exact integer micro-USD per call, dated snapshots resolve, unknown is None
(never 0), the free models cost 0, and the runtime's hook uses this table."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runfold.providers.base import Usage
from runfold.providers.pricing import PRICES, Price, billed_usd_micros, price_of

counts = st.integers(min_value=0, max_value=10**9)


def test_known_models_bill_each_token_class() -> None:
    # claude-sonnet-4-5: $3 in, $15 out, $0.30 cache read, $3.75 cache write per MTok
    usage = Usage(input=1000, output=1000, cache_read=10_000, cache_write=1000)
    assert billed_usd_micros("claude-sonnet-4-5", usage) == 3000 + 15_000 + 3000 + 3750
    # gpt-4o: $2.50 in, $1.25 cached, $10 out; OpenAI has no cache-write surcharge
    assert billed_usd_micros("gpt-4o", Usage(input=2_000_000, output=100_000, cache_read=400_000)) == (
        5_000_000 + 1_000_000 + 500_000
    )
    assert price_of("gpt-4o") == Price(2_500_000, 10_000_000, 1_250_000, 2_500_000)


def test_dated_snapshots_resolve_and_unknown_models_are_none() -> None:
    assert price_of("claude-sonnet-4-5-20250929") == PRICES["claude-sonnet-4-5"]
    assert price_of("gpt-4.1-2025-04-14") == PRICES["gpt-4.1"]
    assert price_of("claude-3-7-sonnet-latest") == PRICES["claude-3-7-sonnet"]
    assert price_of("gpt-5.4") is None  # no loose prefix matching
    assert billed_usd_micros("my-own-model", Usage(input=10, output=10)) is None
    assert billed_usd_micros("my-own-model", Usage()) is None  # unknown stays unknown at 0 tokens


def test_free_models_cost_zero() -> None:
    big = Usage(input=10**6, output=10**6, cache_read=10**6, cache_write=10**6)
    assert billed_usd_micros("smollm2-135m-instruct", big) == 0
    assert billed_usd_micros("script", big) == 0


def test_every_price_is_an_integer_and_output_costs_at_least_input() -> None:
    for model, price in PRICES.items():
        values = (price.input, price.output, price.cache_read, price.cache_write)
        assert all(isinstance(v, int) and v >= 0 for v in values), model
        assert price.output >= price.input, model
        assert price.cache_read <= price.input, model


@settings(max_examples=200, deadline=None)
@given(a=counts, b=counts, c=counts, d=counts, e=counts, f=counts, g=counts, h=counts)
def test_cost_is_monotonic_and_within_half_a_micro_usd_of_exact(
    a: int, b: int, c: int, d: int, e: int, f: int, g: int, h: int
) -> None:
    price = PRICES["claude-opus-4-1"]
    one = Usage(input=a, output=b, cache_read=c, cache_write=d)
    more = Usage(input=a + e, output=b + f, cache_read=c + g, cache_write=d + h)
    assert price.cost(more) >= price.cost(one)
    exact_times_1e6 = a * price.input + b * price.output + c * price.cache_read + d * price.cache_write
    assert abs(price.cost(one) * 1_000_000 - exact_times_1e6) <= 500_000


def test_the_runtime_bill_uses_this_table_and_keeps_unknown_unknown() -> None:
    from runfold.runtime.pricing import make_bill

    bill = make_bill()
    usage = Usage(input=1000, output=1000)
    assert bill("claude-haiku-4-5", usage) == billed_usd_micros("claude-haiku-4-5", usage) == 6000
    assert bill("never-heard-of-it", usage) is None
