"""A serving owner that restarts finds queued dispatches: a delegated child whose parent is
frozen is dropped (it would have been cancelled with its parent) unless it was detached."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from runfold.api import Workspace
from runfold.runtime.spec import new_run_id
from runfold.server.owner import HostedWorkspace, RunOwner
from runfold.store.serving import queue_items, queue_put


def test_a_queued_child_of_a_frozen_parent_is_dropped_unless_detached(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root)
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"content": [{"kind": "text", "text": "done"}]}) + "\n", encoding="utf-8")
    with Workspace.open(root) as ws:
        parent = ws.run("go", model=f"script:{script}", builtin_tools=False).run_id
    attached, detached = new_run_id(), new_run_id()
    for run, detach in ((attached, False), (detached, True)):
        request = {
            "task": "a part",
            "model": f"script:{script}",
            "agents": True,
            "builtin_tools": False,
            "delegated": {"parent": parent, "by": "agent", "detach": detach},
        }
        queue_put(root, run, request)

    async def main() -> RunOwner:
        owner = RunOwner(HostedWorkspace(root))
        await owner.start()
        try:
            h = owner.hosted[detached]
            assert h.task is not None
            await asyncio.wait_for(h.task, 60)
        finally:
            await owner.stop()
        return owner

    owner = asyncio.run(main())
    (dropped,) = owner.dropped
    assert dropped[0] == attached and f"its parent run {parent} is frozen as done" in dropped[1]
    assert owner.recovered == [detached]
    assert queue_items(root) == []
    with Workspace.open(root) as ws:
        assert attached not in {s.run for s in ws.run_summaries()}
        started = ws.records(detached, limit=1)[0].env.data
        assert started["parent"] == parent and started["opening"] == "inherited"
