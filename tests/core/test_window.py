"""The window's budgets (`core.window`): `[context]` of config.toml checked key by key, shares that
must add up, and a model window refused before the run when its frozen prefix cannot fit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.window import REGIONS, STRATEGIES, ContextSettings, budgets, parse_context


def test_defaults_add_up_and_every_key_has_a_default() -> None:
    settings = parse_context({})
    assert settings == ContextSettings()
    assert sum(settings.share(r) for r in REGIONS) <= 1000
    assert settings.compaction == STRATEGIES


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"conversation_permile": 600}, "context.conversation_permile"),
        ({"conversation_permille": 1001}, "context.conversation_permille"),
        ({"conversation_permille": True}, "context.conversation_permille"),
        ({"offload_bytes": 0}, "context.offload_bytes"),
        ({"offload_bytes": 100, "offload_head_bytes": 200}, "context.offload_head_bytes"),
        ({"compaction": ["summary", "summary"]}, "context.compaction"),
        ({"compaction": ["truncate"]}, "context.compaction"),
        ({"reminders_permille": [100, 250]}, "context.reminders_permille"),
        ({"reminders_permille": [1000]}, "context.reminders_permille"),
        ({"keep_waves": -1}, "context.keep_waves"),
    ],
)
def test_bad_keys_are_refused_naming_the_key(table: dict[str, object], key: str) -> None:
    with pytest.raises(RunfoldError) as err:
        parse_context(table, "ws/.runfold/config.toml")
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert key in err.value.action
    assert err.value.subject == "ws/.runfold/config.toml"


def test_shares_over_the_whole_window_are_refused_with_the_sum() -> None:
    with pytest.raises(RunfoldError) as err:
        parse_context({"conversation_permille": 900})
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert "1250‰" in err.value.recovery and "conversation 900" in err.value.recovery


def test_a_window_smaller_than_the_frozen_prefix_is_refused_with_the_sizes() -> None:
    with pytest.raises(RunfoldError) as err:
        budgets(ContextSettings(), window=2048, output=512, prefix_tokens=1600, model="tiny")
    assert err.value.code is ErrorCode.CONFIG_INVALID
    assert "1600 tokens" in err.value.recovery and "1536" in err.value.recovery
    # larger than its system share only: not refused, the conversation gives up the difference
    over = budgets(ContextSettings(), window=2048, output=512, prefix_tokens=400, model="tiny")
    assert over.regions["system"] == 307 and over.prefix == 400
    assert over.conversation == min(over.regions["conversation"], 1536 - 400)
    assert over.prefix_over_share is not None and "system budget" in over.prefix_over_share
    fits = budgets(ContextSettings(), window=2048, output=512, prefix_tokens=300, model="tiny")
    assert fits.prefix_over_share is None and fits.conversation == fits.regions["conversation"]
    with pytest.raises(RunfoldError):
        budgets(ContextSettings(), window=512, output=512, prefix_tokens=1, model="tiny")


@given(
    window=st.integers(2, 2_000_000),
    output_share=st.integers(0, 999),
    shares=st.lists(st.integers(0, 200), min_size=5, max_size=5),
)
def test_region_budgets_never_exceed_the_input_window(window: int, output_share: int, shares: list[int]) -> None:
    settings = ContextSettings(**{f"{r}_permille": s for r, s in zip(REGIONS, shares, strict=True)})
    output = window * output_share // 1000
    if output >= window:
        return
    b = budgets(settings, window, output, prefix_tokens=0, model="m")
    assert sum(b.regions.values()) <= b.input
    assert all(v >= 0 for v in b.regions.values())
