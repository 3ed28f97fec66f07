"""Helpers for the agent-tool tests: a workspace whose `[agents]` limits are set, and the
scripts every run of a delegation tree plays (each run of a tree reads the same script: it
delegates, waits for the replies, answers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from srv_support import write_script

from runfold.api import Workspace


def agents_workspace(root: Path, *, max_depth: int = 2, max_fan_out: int = 3) -> Path:
    Workspace.init(root)
    cfg = root / ".runfold" / "config.toml"
    cfg.write_text(
        cfg.read_text(encoding="utf-8") + f"\n[agents]\nmax_depth = {max_depth}\nmax_fan_out = {max_fan_out}\n",
        encoding="utf-8",
    )
    return root


def tree_script(path: Path, answer: str, *, fan_out: int = 3, task: str = "part", delay_ms: int = 0) -> Path:
    """Delegate `fan_out` tasks in one reply, wait for every reply, answer `answer`. A run at
    the depth limit gets a tool error for each delegation and for the wait, then answers too."""
    calls: list[dict[str, Any]] = [
        {"kind": "tool_use", "id": f"d{i}", "name": "delegate", "input": {"task": f"{task} {i}"}} for i in range(fan_out)
    ]
    return write_script(
        path,
        [
            {"content": [{"kind": "text", "text": "splitting the work"}, *calls]},
            {"content": [{"kind": "tool_use", "id": "w", "name": "wait_for_reply", "input": {"timeout_s": 600}}]},
            {"content": [{"kind": "text", "text": answer}], **({"delay_ms": delay_ms} if delay_ms else {})},
        ],
    )
