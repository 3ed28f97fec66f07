"""Approval policies are checked where they are given: `[approvals]` of config.toml, `--approve`
on the command line, `approvals=` in Python; a mistake is one clear error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.cli_support import run_cli
from runfold.api import Workspace
from runfold.core.approval import parse_flag
from runfold.core.errors import RunfoldError
from runfold.runtime.config import parse_config
from runfold.runtime.spec import RunSpec


def test_config_policies_parse_and_bad_ones_name_the_key() -> None:
    assert parse_config({"approvals": {"exec": "ask", "mcp": "deny"}}).approvals == {"exec": "ask", "mcp": "deny"}
    with pytest.raises(RunfoldError) as info:
        parse_config({"approvals": {"shell": "ask"}}, "config.toml")
    assert info.value.code.value == "E_CONFIG_INVALID" and "'shell'" in info.value.display()
    assert "read, write, exec, mcp" in info.value.display()
    with pytest.raises(RunfoldError) as info:
        parse_config({"approvals": {"exec": "maybe"}}, "config.toml")
    assert info.value.code.value == "E_CONFIG_INVALID" and "allow, ask, deny" in info.value.display()


def test_flags_parse_and_refuse_clearly() -> None:
    assert parse_flag("exec=ask") == ("exec", "ask")
    for bad in ("exec", "exec=later", "net=ask"):
        with pytest.raises(RunfoldError) as info:
            parse_flag(bad)
        assert info.value.code.value == "E_INVALID_ARGS"
    with pytest.raises(RunfoldError):
        RunSpec("t", approvals={"exec": "sometimes"})


def test_yes_and_approve_together_are_refused_before_anything_runs(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    (root / "s.jsonl").write_text(json.dumps({"content": [{"kind": "text", "text": "hi"}]}) + "\n")
    res = run_cli("run", "t", "--model", "script:s.jsonl", "--yes", "--approve", "exec=ask", "-w", root, cwd=root)
    assert res.code == 2 and "give --yes or --approve, not both" in res.err
    res = run_cli("run", "t", "--model", "script:s.jsonl", "--approve", "exec", "-w", root, cwd=root)
    assert res.code == 2 and "CLASS=POLICY" in res.err
    assert len(Workspace.open(root).records()) == 1  # only workspace_initialized
