"""Delegation without a server: the children of a run driven by `Workspace.arun_spec` are tasks of
the same process, found through the same ledger; a child that cannot start (a room outside the
grammar) is a tool error for the parent, never a child it waits for in vain."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from runfold.api import Workspace
from runfold.runtime.spec import RunSpec


def test_a_child_in_process_replies_and_a_bad_room_is_a_tool_error(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root)
    cfg = root / ".runfold" / "config.toml"
    cfg.write_text(cfg.read_text() + "\n[agents]\nmax_depth = 1\n", encoding="utf-8")
    script = tmp_path / "s.jsonl"
    entries = [
        {"content": [
            {"kind": "tool_use", "id": "bad", "name": "delegate", "input": {"task": "t", "room": "../outside"}},
            {"kind": "tool_use", "id": "ok", "name": "delegate", "input": {"task": "t", "room": "lab"}},
        ]},
        {"content": [{"kind": "tool_use", "id": "w", "name": "wait_for_reply", "input": {"timeout_s": 60}}]},
        {"content": [{"kind": "text", "text": "answer"}]},
    ]
    script.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")

    async def main() -> str:
        with Workspace.open(root) as ws:
            out = await ws.arun_spec(RunSpec("go", model=f"script:{script}#openai-chat", builtin_tools=False, agents=True))
            assert out.completion == "done", out.reason
            return out.run_id

    run = asyncio.run(main())
    with Workspace.open(root) as ws:
        results = [r.env.data for r in ws.records(run) if r.env.kind == "tool_result"]
        assert results[0]["error"]["code"] == "E_INVALID_ARGS"
        child = results[1]["result"]["run"]
        assert results[2]["result"]["replied"] == [child]
        (letter,) = [r.env.data for r in ws.records(run) if r.env.kind == "steer_received"]
        assert letter["source"] == f"@lab run={child} kind=reply sender=done" and letter["text"] == "answer"
        started = ws.records(child, limit=1)[0]
        assert started.env.addr == "lab" and started.env.data["parent"] == run
        assert ws.replay(run).ok and ws.replay(child).ok
