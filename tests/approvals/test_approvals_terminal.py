"""The approval prompt in a real terminal: `runfold run` runs inside tmux, shows the diff of the
write it waits on, and the keys typed into the pane approve it or deny it with a reason."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from control.ctl_support import ledger_lines, runfold, write_script
from runfold.api import Workspace

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None and os.environ.get("CI") != "true",
    reason="needs tmux (`.ci/run` installs it; CI never skips)",
)


def use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}]}


def say(text: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}]}


def _run_command(root: Path, script: Path) -> str:
    return (
        f"{shlex.quote(sys.executable)} -m runfold run 'write the plan' --model script:{shlex.quote(str(script))} "
        f"--approve write=ask -w {shlex.quote(str(root))}"
    )


def test_approve_in_the_terminal_shows_the_diff_and_the_write_acts(tmp_path: Path, pane_for: Any) -> None:
    root = Workspace.init(tmp_path / "ws").root
    (root / "plan.md").write_text("step 0\n", encoding="utf-8")
    script = write_script(
        tmp_path / "s.jsonl", [use("call_w", "write_file", {"path": "plan.md", "content": "step 1\n"}), say("Done.")]
    )
    pane = pane_for(_run_command(root, script), root)
    shown = pane.wait_for("approve? [y]es / [n]o")
    assert "approval needed: write_file (write tool), call call_w" in shown
    assert "-step 0" in shown and "+step 1" in shown  # the diff of the write
    assert (root / "plan.md").read_text() == "step 0\n"  # nothing acted yet
    pane.type("y")
    pane.wait_for("EXITED=0")
    assert (root / "plan.md").read_text() == "step 1\n"
    resolved = [line["data"] for line in ledger_lines(root) if line["kind"] == "approval_resolved"]
    assert resolved == [{"by": "person", "decision": "approved", "tool_use_id": "call_w", "via": "terminal"}]
    assert runfold(root, "verify").returncode == 0


def test_a_reason_typed_in_the_terminal_denies_the_call(tmp_path: Path, pane_for: Any) -> None:
    root = Workspace.init(tmp_path / "ws").root
    script = write_script(
        tmp_path / "s.jsonl", [use("call_w", "write_file", {"path": "plan.md", "content": "x\n"}), say("I will ask.")]
    )
    pane = pane_for(_run_command(root, script), root)
    pane.wait_for("approve? [y]es / [n]o")
    pane.type("ask me before writing plans")
    pane.wait_for("EXITED=0")
    assert not (root / "plan.md").exists()
    lines = ledger_lines(root)
    resolved = next(line["data"] for line in lines if line["kind"] == "approval_resolved")
    assert resolved["decision"] == "denied" and resolved["reason"] == "ask me before writing plans"
    result = next(line["data"] for line in lines if line["kind"] == "tool_result")
    assert "ask me before writing plans" in result["error"]["action"]
    run = resolved and next(line["run"] for line in lines if line["kind"] == "run_started")
    assert "ok: 2/2 requests byte-exact" in runfold(root, "replay", run).stdout
