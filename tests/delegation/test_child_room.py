"""A delegated child works inside its parent's room: a run may write only inside its room
(DESIGN.md §9), so a run confined to a room cannot widen that by delegating to a child in the
workspace root or in another room; it gets an `E_GATE_DENIED` tool result naming the rule, and
a child in a room below its own is dispatched."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from runfold.api import Workspace
from runfold.runtime.executor import RunOutcome
from runfold.runtime.spec import RunSpec


def _workspace(root: Path) -> Path:
    """A workspace whose children may not delegate further ([agents] max_depth = 1)."""
    Workspace.init(root)
    cfg = root / ".runfold" / "config.toml"
    cfg.write_text(cfg.read_text() + "\n[agents]\nmax_depth = 1\n", encoding="utf-8")
    return root


def _parent_in_lab(root: Path, script: Path, entries: list[dict[str, Any]]) -> RunOutcome:
    """Drive a run confined to room `lab` whose scripted model plays `entries`."""
    script.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")

    async def main() -> RunOutcome:
        with Workspace.open(root) as ws:
            spec = RunSpec("go", model=f"script:{script}", room="lab", builtin_tools=False, agents=True)
            return await ws.arun_spec(spec)

    return asyncio.run(main())


def test_a_child_may_not_work_outside_its_parents_room(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "ws")
    rooms = [".", "other", "labx", "lab/sub"]
    entries = [
        {"content": [
            {"kind": "tool_use", "id": f"d{i}", "name": "delegate", "input": {"task": "write here", "room": room}}
            for i, room in enumerate(rooms)
        ]},
        {"content": [{"kind": "tool_use", "id": "w", "name": "wait_for_reply", "input": {"timeout_s": 60}}]},
        {"content": [{"kind": "text", "text": "answer"}]},
    ]
    out = _parent_in_lab(root, tmp_path / "s.jsonl", entries)
    assert out.completion == "done", out.reason
    run = out.run_id
    with Workspace.open(root) as ws:
        results = [r.env.data for r in ws.records(run) if r.env.kind == "tool_result"]
        for data, room in zip(results[:3], rooms[:3], strict=True):
            err = data["error"]
            assert err["code"] == "E_GATE_DENIED", (room, data)
            assert "lab" in err["gate"]["rule"] and repr(room) in err["action"] and err["gate"]["alternative"]
        child = results[3]["result"]["run"]
        assert ws.records(child, limit=1)[0].env.addr == "lab/sub"
        assert [r for r in ws.runs() if r != run] == [child]


def test_a_child_room_that_is_a_symlink_out_of_the_parents_room_is_refused(tmp_path: Path) -> None:
    """The parent's own room is writable, so it can plant `lab/sub -> ../other` (here: planted
    before the run); a child in `lab/sub` would then write in `other`. The room is checked by
    its real path, as the sandbox binds it."""
    root = _workspace(tmp_path / "ws")
    (root / "lab").mkdir()
    (root / "other").mkdir()
    (root / "lab" / "sub").symlink_to("../other")
    entries = [
        {"content": [{"kind": "tool_use", "id": "d", "name": "delegate", "input": {"task": "write", "room": "lab/sub"}}]},
        {"content": [{"kind": "text", "text": "answer"}]},
    ]
    run = _parent_in_lab(root, tmp_path / "s.jsonl", entries).run_id
    with Workspace.open(root) as ws:
        (data,) = [r.env.data for r in ws.records(run) if r.env.kind == "tool_result"]
        assert data["error"]["code"] == "E_GATE_DENIED", data
        assert "other" in data["error"]["gate"]["violation"]
        assert [r for r in ws.runs() if r != run] == []
