"""Provider settings that count something (tokens, threads, seconds) are refused below 1 when
config.toml is read, naming the key, instead of failing in the middle of a run."""

from __future__ import annotations

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.runtime.config import parse_config


def test_provider_counts_below_one_are_refused_naming_the_key() -> None:
    for key, value in (("max_tokens", 0), ("max_tokens", -5), ("timeout_s", 0)):
        with pytest.raises(RunfoldError) as err:
            parse_config({"providers": {"anthropic": {key: value}}})
        assert err.value.code is ErrorCode.CONFIG_INVALID
        assert f"providers.anthropic.{key}" in err.value.action
