"""`runfold run` with a task that is empty or only whitespace is a usage error (`E_INVALID_ARGS`,
exit 2) and writes nothing — not a corrupt-ledger error about a line that was never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli

from runfold.api import Workspace


@pytest.mark.parametrize("task", ["   ", "\n\t "])
def test_a_blank_task_is_refused_before_any_line(tmp_path: Path, task: str) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"content": [{"kind": "text", "text": "hi"}]}) + "\n")
    before = len(Workspace.open(root).records())
    res = run_cli("run", task, "--model", f"script:{script}", cwd=root)
    assert res.code == 2, res.out + res.err
    assert "E_INVALID_ARGS" in res.err and "E_LEDGER_CORRUPT" not in res.err + res.out
    assert len(Workspace.open(root).records()) == before
    assert run_cli("verify", cwd=root).code == 0
