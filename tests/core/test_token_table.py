"""The pure token layer: method names, the bytes estimate and its calibration on billed calls,
the context-window table and the `[models."<name>"]` overrides merged onto it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.tokens import (
    CALIBRATED,
    ENCODINGS,
    ESTIMATE,
    MODELS,
    O200K,
    TOKEN_METHODS,
    Calibration,
    ModelLimits,
    TokenCount,
    calibrate,
    calibrated_tokens,
    estimate,
    estimate_tokens,
    merge_models,
    model_limits,
    window_tokens,
)


def test_method_wire_names_are_pinned() -> None:
    assert TOKEN_METHODS == ("tokenizer", "provider_count", "calibrated", "estimate")


def test_token_count_data() -> None:
    assert TokenCount(5, "estimate", "bytes/4").to_data() == {
        "method": "estimate",
        "source": "bytes/4",
        "tokens": 5,
    }
    assert TokenCount(5, "estimate", "bytes/4", "no key").to_data()["fallback"] == "no key"


# -- estimate and calibration -----------------------------------------------------------------


def test_estimate_without_history_is_bytes_over_four_rounded_up() -> None:
    assert [estimate(n).tokens for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    count = estimate(10, fallback="no tokenizer")
    assert (count.method, count.source, count.fallback) == (ESTIMATE, "bytes/4", "no tokenizer")


def test_calibrate_is_the_integer_per_mille_ratio_rounded_half_up() -> None:
    assert calibrate([]) is None
    assert calibrate([(0, 10), (100, 0)]) is None  # no bytes or no tokens: not evidence
    assert calibrate([(1000, 262)]) == Calibration(262, 1000, 262, 1)
    assert calibrate([(3000, 1), (0, 5)]) == Calibration(1, 3000, 1, 1)  # 0.33‰ rounds to 0: kept ≥ 1
    assert calibrate([(2000, 1001)]) == Calibration(501, 2000, 1001, 1)  # 500.5 rounds up
    assert calibrate([(1000, 300), (3000, 700)]) == Calibration(250, 4000, 1000, 2)


def test_calibrated_estimate_uses_the_ratio_and_says_so() -> None:
    cal = calibrate([(4000, 1000)])
    count = estimate(1001, cal, fallback="no tokenizer")
    assert (count.tokens, count.method, count.fallback) == (251, CALIBRATED, "no tokenizer")
    assert "250‰" in count.source and "1 billed calls" in count.source


def test_window_tokens_adds_the_cached_prompt_tokens() -> None:
    assert window_tokens({"input": 11, "output": 7, "cache_read": 100, "cache_write": 20}) == 131
    assert window_tokens({"input": 3, "cache_read": None, "cache_write": True}) == 3
    assert window_tokens({}) == 0


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 5000))
def test_calibrated_tokens_is_a_monotone_non_negative_integer(a: int, b: int, per_mille: int) -> None:
    lo, hi = sorted((a, b))
    x, y = calibrated_tokens(lo, per_mille), calibrated_tokens(hi, per_mille)
    assert isinstance(x, int) and isinstance(y, int)
    assert 0 <= x <= y


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_plain_estimate_is_monotone_and_matches_why(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert 0 <= estimate(lo).tokens <= estimate(hi).tokens
    assert estimate(lo).tokens == estimate_tokens(lo)


@given(st.lists(st.tuples(st.integers(1, 10**7), st.integers(1, 10**7)), min_size=1, max_size=20))
def test_calibration_reproduces_its_own_history(pairs: list[tuple[int, int]]) -> None:
    cal = calibrate(pairs)
    assert cal is not None and cal.per_mille >= 1 and isinstance(cal.per_mille, int)
    # over the whole history the calibrated figure is off by at most half a per-mille step
    got = calibrated_tokens(cal.bytes, cal.per_mille)
    assert isinstance(got, int) and got >= 0
    if cal.tokens * 1000 >= cal.bytes:  # the ratio was not clamped up to 1‰
        assert abs(got - cal.tokens) <= cal.bytes // 2000 + 1


# -- context windows ------------------------------------------------------------------------------


def test_model_limits_resolve_snapshots_and_nothing_else() -> None:
    assert model_limits("claude-sonnet-4-5-20250929") == MODELS["claude-sonnet-4-5"]
    assert model_limits("claude-opus-4-20250514") == MODELS["claude-opus-4"]
    assert model_limits("gpt-4o-2024-08-06") == MODELS["gpt-4o"]
    assert model_limits("gpt-4o-mini-2024-07-18") == MODELS["gpt-4o-mini"]
    assert model_limits("claude-3-5-haiku-latest") == MODELS["claude-3-5-haiku"]
    assert model_limits("gpt-5.4") is None
    assert model_limits("mystery") is None


def test_builtin_table_is_consistent() -> None:
    for name, limits in MODELS.items():
        assert limits.context_window >= 1, name
        if limits.max_output_tokens is not None:
            assert limits.max_output_tokens <= limits.context_window, name
        if name.startswith("claude-"):
            assert limits.encoding is None, name  # counted by the provider, not offline
        if name.startswith(("gpt-", "o1", "o3", "o4")):
            assert limits.encoding in ENCODINGS, name
    assert MODELS["gpt-4o"].encoding == O200K
    assert MODELS["gpt-4"].encoding == "cl100k_base"


def test_merge_overrides_fields_and_adds_models() -> None:
    merged = merge_models(
        {
            "gpt-4o": {"context_window": 64_000},
            "my-model": {"context_window": 32_768, "max_output_tokens": 4096, "encoding": "cl100k_base"},
        }
    )
    assert merged["gpt-4o"] == ModelLimits(64_000, 16_384, O200K)  # the rest kept
    assert merged["my-model"] == ModelLimits(32_768, 4096, "cl100k_base")
    assert merged["claude-opus-4-5"] == MODELS["claude-opus-4-5"]
    assert model_limits("my-model-20260101", merged) == merged["my-model"]
    assert "my-model" not in MODELS  # the built-in table is not changed
    assert merge_models({}, {"x": ModelLimits(10)}) == {"x": ModelLimits(10)}


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"gpt-4o": {"context_windw": 1}}, 'models."gpt-4o".context_windw'),
        ({"gpt-4o": {"context_window": "128k"}}, 'models."gpt-4o".context_window'),
        ({"gpt-4o": {"context_window": True}}, 'models."gpt-4o".context_window'),
        ({"gpt-4o": {"context_window": 0}}, 'models."gpt-4o".context_window'),
        ({"gpt-4o": {"max_output_tokens": 1.5}}, 'models."gpt-4o".max_output_tokens'),
        ({"gpt-4o": {"max_output_tokens": 200_000}}, 'models."gpt-4o".max_output_tokens'),
        ({"gpt-4o": {"encoding": "p50k_base"}}, 'models."gpt-4o".encoding'),
        ({"gpt-4o": 128_000}, 'models."gpt-4o"'),
        ({"new-model": {"max_output_tokens": 10}}, 'models."new-model".context_window'),
    ],
)
def test_merge_refuses_bad_entries_naming_the_key(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(RunfoldError) as info:
        merge_models(overrides)
    err = info.value
    assert err.code is ErrorCode.CONFIG_INVALID
    assert err.action == f"read the setting {key}"
    assert key in err.display()
