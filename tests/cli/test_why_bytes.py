"""`runfold why RUN --at SEQ --bytes` (DESIGN.md §10): every byte of the request the window renders
to attributed to a line and a cause, the lines adding up to the request replay rebuilds; the
request of a `model_called` cut is the one it sent."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

from cli_support import run_cli

from runfold.api import Workspace

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "garden-session.jsonl"


def test_why_bytes_adds_up_to_the_request_sent(tmp_path: Path) -> None:
    ws = tmp_path / "garden"
    assert run_cli("init", "-w", ws, cwd=tmp_path).code == 0
    shutil.copytree(REPO / "examples" / "garden", ws, dirs_exist_ok=True)
    assert run_cli("run", "What is on the to-do list?", "--model", f"script:{SCRIPT}", "-w", ws, cwd=tmp_path).code == 0
    with Workspace.open(ws) as w:
        (run,) = [r for r in w.runs() if not r.startswith("00000000")]
        called = [r for r in w.records(run=run) if r.kind_name == "model_called"]
        steered = {r.seq for r in w.records(run=run) if r.kind_name in ("run_started", "prompt_assembled")}
    last = called[-1]
    r = run_cli("why", run, "--at", str(last.seq - 1), "--bytes", "--json", "-w", ws, cwd=tmp_path)
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["bytes"] == last.env.data["request"]["bytes"]
    assert sum(row["bytes"] for row in data["by_line"]) == data["bytes"] == sum(data["by_cause"].values())
    spans = data["spans"]
    assert spans[0][0] == 0 and spans[-1][1] == data["bytes"]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    causes = {row["cause"] for row in data["by_line"]}
    assert {"seed", "model_reply", "tool_result"} <= causes
    assert any(row["seq"] in steered and row["cause"] == "seed" for row in data["by_line"])
    text = run_cli("why", run, "--at", str(last.seq - 1), "--bytes", "-w", ws, cwd=tmp_path)
    assert text.code == 0 and f"request {data['bytes']:,} bytes" in text.out  # counts print with separators
    assert "total" in text.out and f"{data['bytes']:,}" in text.out.splitlines()[-1]
