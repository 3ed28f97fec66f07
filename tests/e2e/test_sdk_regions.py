"""The context tools through each official SDK against the provider test server (DESIGN.md §10).

`runfold run` with the context tools named in `[defaults] tools`: the scripted model pins a
note, adds and ticks a todo item and writes scratch; the server must accept every request (the
regions block at the end of the last user message, in every dialect), the bytes it received must
hash to `model_called`, `runfold replay` must be byte-exact, a fork before the first edit must
not see it and one after must, and `runfold context` must print the regions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_support import run_cli
from test_sdk_runs import FAMILIES, check_wire, env_for, use, workspace

from provider_server import ProviderServer
from runfold.api import Workspace
from runfold.core.canonical import content_hash
from runfold.core.regions import REGIONS_HEAD
from runfold.runtime.replay import rebuilt_requests
from runfold.store.cas import Cas
from runfold.tools.regions import CONTEXT_TOOL_NAMES

SCRIPT: list[dict[str, Any]] = [
    {
        "content": [
            {"kind": "text", "text": "Pinning the plan first."},
            use("call_n1", "notes_write", {"name": "plan", "text": "read a.md, then write summary.md"}),
            use("call_t2", "todo_add", {"text": "read a.md"}),
        ],
        "usage": {"input": 900, "output": 40, "cache_read": 0, "cache_write": 800},
    },
    {
        "content": [use("call_r3", "read_file", {"path": "a.md"}), use("call_t4", "todo_done", {"item": 1})],
        "usage": {"input": 120, "output": 30, "cache_read": 900, "cache_write": 0},
    },
    {
        "content": [use("call_s5", "scratch_write", {"text": "a.md: alpha"})],
        "usage": {"input": 130, "output": 20, "cache_read": 1000, "cache_write": 0},
    },
    {
        "content": [{"kind": "text", "text": "a.md says alpha."}],
        "usage": {"input": 140, "output": 9, "cache_read": 1100, "cache_write": 0},
    },
]


@pytest.mark.parametrize("dialect", list(FAMILIES))
def test_context_tools_through_the_sdk(tmp_path: Path, dialect: str) -> None:
    spec, prefix, config = FAMILIES[dialect]
    tools = json.dumps(["read_file", *CONTEXT_TOOL_NAMES])
    root = workspace(tmp_path, f"[defaults]\ntools = {tools}\n{config}")
    with ProviderServer(SCRIPT) as server:
        res = run_cli(
            "run", "say what a.md holds", "--model", spec, "--room", "docs", "--json", "-w", root,
            cwd=root, env=env_for(prefix, server),
        )
        assert res.code == 0, res.out + res.err
        out = json.loads(res.out)
        assert out["completion"] == "done" and out["tool_calls"] == 5
        check_wire(root, out["run"], server, len(SCRIPT))
        head = json.dumps(REGIONS_HEAD)[1:-1].encode()
        bodies = [r.raw for r in server.requests]
        assert head not in bodies[0] and all(head in b for b in bodies[1:])
    ws = Workspace.open(root)
    lines = ws.records(run=out["run"])
    edits = [r for r in lines if r.kind_name == "context_changed"]
    assert [(r.env.data["region"], r.env.data["op"]) for r in edits] == [
        ("notes", "write"), ("todo", "add"), ("todo", "done"), ("scratch", "write"),
    ]
    for req in rebuilt_requests(ws.lineage_lines(out["run"]), out["run"], Cas(ws.root).get_locator):
        att = req.attributed()  # every byte owned once, the regions block by its latest edit
        assert content_hash(att.body) == req.called.request.hash
        assert sum(att.by_owner().values()) == len(att.body)
        edited = [seq for seq, cause in att.by_owner() if cause == "context_tool"]
        assert edited == ([] if req.seq < edits[0].seq else [max(r.seq for r in edits if r.seq < req.seq)])
    points = ws.fold(out["run"]).safe_points
    before = max(s for s in points if s < edits[0].seq)
    after = min(s for s in points if s > edits[-1].seq)
    early, late = ws.fork(out["run"], before), ws.fork(out["run"], after)
    assert ws.fold(early.new_run).regions.empty
    assert ws.fold(late.new_run).regions.scratch == "a.md: alpha"
    ws.close()
    shown = run_cli("context", out["run"], "-w", root, cwd=root)
    assert shown.code == 0, shown.err
    assert 'runtime: <note name="plan">read a.md, then write summary.md</note>' in shown.out
    assert 'runtime: <item n="1" done="yes">read a.md</item>' in shown.out
    assert "runtime: <scratch>a.md: alpha</scratch>" in shown.out
