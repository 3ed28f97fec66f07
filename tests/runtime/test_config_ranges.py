"""Provider settings that count something (tokens, threads, seconds) are refused below 1 when
config.toml is read, naming the key, instead of failing in the middle of a run."""

from __future__ import annotations

import pytest

from runfold.core.errors import ErrorCode, RunfoldError
from runfold.runtime.config import parse_config
from runfold.tools.sandbox import ExecSettings


def test_provider_counts_below_one_are_refused_naming_the_key() -> None:
    for key, value in (("max_tokens", 0), ("max_tokens", -5), ("timeout_s", 0)):
        with pytest.raises(RunfoldError) as err:
            parse_config({"providers": {"anthropic": {key: value}}})
        assert err.value.code is ErrorCode.CONFIG_INVALID
        assert f"providers.anthropic.{key}" in err.value.action


def test_tools_exec_settings_are_checked() -> None:
    assert parse_config({}).exec == ExecSettings(sandbox="bwrap", network=False)
    got = parse_config({"tools": {"exec": {"sandbox": "none", "network": True}}}).exec
    assert got == ExecSettings(sandbox="none", network=True)
    for bad, key in (
        ({"tools": {"exec": {"sandbox": "off"}}}, "tools.exec.sandbox"),
        ({"tools": {"exec": {"network": "yes"}}}, "tools.exec.network"),
        ({"tools": {"exec": {"netwrok": True}}}, "tools.exec.netwrok"),
        ({"tools": {"shell": {}}}, "tools.shell"),
    ):
        with pytest.raises(RunfoldError) as info:
            parse_config(bad)
        assert info.value.code is ErrorCode.CONFIG_INVALID and key in info.value.action
