"""Agents together through a real `runfold serve` process: a delegation tree three levels deep
with a fan-out of three in each dialect, every request of every run valid in all three dialects
and replayed byte-exact; the depth limit reaches the model as a tool error; a child's reply comes
back to its parent as a letter of kind `reply` (cause `fan_out`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from agents_support import agents_workspace, tree_script
from srv_support import start_server, wait_state

from runfold.api import Workspace
from runfold.core.render import DIALECTS
from runfold.core.speakers import Letter, parse_source

TREE_RUNS = 1 + 3 + 9
"""A root, its three children, their nine children (the depth limit is 2)."""



@pytest.fixture
def served_tree(tmp_path: Path):
    root = agents_workspace(tmp_path / "ws", max_depth=2, max_fan_out=3)
    srv = start_server(root, "--max-runs", "64")
    yield srv
    srv.stop()


def test_a_tree_three_deep_with_fan_out_three_validates_in_every_dialect(served_tree, tmp_path: Path) -> None:
    roots: dict[str, str] = {}
    with served_tree.client(timeout=120) as c:
        for dialect in DIALECTS:
            script = tree_script(tmp_path / f"{dialect}.jsonl", f"answer from a {dialect} run")
            body = {"task": f"split the {dialect} work", "model": f"script:{script}#{dialect}", "agents": True, "builtin_tools": False}
            resp = c.post("/runs", json=body)
            assert resp.status_code == 202, resp.text
            roots[resp.json()["run"]] = dialect
        for run in roots:
            assert wait_state(c, run, ("done", "cancelled", "limit"), timeout=300)["state"] == "done"
        runs = c.get("/runs").json()["runs"]
    assert len(runs) == len(roots) * TREE_RUNS
    by_id = {r["run"]: r for r in runs}
    assert all(r["state"] == "done" for r in runs)
    children = Counter(r["parent"] for r in runs if r["parent"] is not None)
    middles = [r for r in runs if r["parent"] in roots]
    leaves = [r for r in runs if r["parent"] is not None and r["parent"] not in roots]
    assert len(middles) == 3 * len(roots) and len(leaves) == 9 * len(roots)
    assert all(children[r] == 3 for r in roots) and all(children[m["run"]] == 3 for m in middles)
    assert all(children[leaf["run"]] == 0 for leaf in leaves)
    with Workspace.open(served_tree.root) as ws:
        checked = 0
        for run in by_id:
            lines = ws.records(run)
            started = lines[0].env
            assert started.kind == "run_started"
            if run in roots:
                assert "parent" not in started.data and started.data["opening"] == "with_person"
            else:
                assert started.data["parent"] == by_id[run]["parent"] and started.data["dispatched_by"] == "agent"
                assert started.data["opening"] == "inherited"  # the parent's words, escaped, never the person's
            report = ws.replay(run)
            assert report.ok and report.requests == 3 and not report.invalid, report.summary()
            for rec in lines:
                if rec.env.kind == "model_called":
                    for dialect in DIALECTS:
                        view = ws.request_at(run, rec.seq, dialect)
                        assert all(v == [] for v in view.verdicts.values()), (run, rec.seq, view.verdicts)
                    checked += 1
            kinds = [rec.env.kind for rec in lines]
            leaf = run not in roots and by_id[run]["parent"] not in roots
            if leaf:  # past the depth limit: three tool errors, no wait lines
                errors = [r.env.data["error"]["code"] for r in lines if r.env.kind == "tool_result" and "error" in r.env.data]
                assert errors == ["E_GATE_DENIED"] * 3 + ["E_INVALID_ARGS"]
                assert "signal_wait_started" not in kinds
            else:
                assert kinds.count("signal_wait_started") == 1 and kinds.count("signal_wait_ended") == 1
                ended = next(r for r in lines if r.env.kind == "signal_wait_ended").env.data
                assert ended["outcome"] == "replied" and len(ended["replied"]) == 3 and ended["pending"] == []
                replies = [r for r in lines if r.env.kind == "steer_received"]
                assert len(replies) == 3
                for r in replies:
                    letter = parse_source(r.env.data["source"])
                    assert isinstance(letter, Letter) and letter.kind == "reply" and letter.sender == "done"
                    assert by_id[letter.run or ""]["parent"] == run
                    assert r.env.data["text"] == f"answer from a {roots.get(run) or _dialect(run, by_id, roots)} run"
                    assert r.seq > next(x.seq for x in lines if x.env.kind == "signal_wait_started")
                fold = ws.request_at(run).fold
                causes = [b.cause for m in fold.sources for b in m if b.seq in {x.seq for x in replies}]
                assert causes == ["fan_out"] * 3
        assert checked == len(by_id) * 3
        assert ws.verify().lines > 0


def _dialect(run: str, by_id: dict[str, dict[str, object]], roots: dict[str, str]) -> str:
    while run not in roots:
        run = str(by_id[run]["parent"])
    return roots[run]
