"""Compaction at the turn boundary, end to end with scripted models (DESIGN.md §10)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cp_support import changes, check_run, read, reply, say, two_scripts, workspace

from runfold.core.kinds import Kind


def files(root: Path, n: int, size: int) -> None:
    for i in range(n):
        (root / f"f{i}.txt").write_text((f"line {i} " * (size // 7 + 1))[:size])


@pytest.mark.parametrize("dialect", ["anthropic", "openai-chat", "openai-responses"])
def test_a_long_read_compacts_and_replays(tmp_path: Path, dialect: str) -> None:
    root = tmp_path / "ws"
    ws = workspace(root, window=6000)
    files(root, 8, 3000)
    turns = [reply(say(f"reading {i}"), read(f"c{i}", f"f{i}.txt")) for i in range(8)]
    turns.append(reply(say("all read")))
    p = two_scripts(turns, [reply(say("Read f0..f5; each holds repeated lines."))] * 4, dialect)
    out = ws.run("read every file", model=p, builtin_tools=["read_file"])
    assert out.completion == "done", out.reason
    lines = ws.records(run=out.run_id)
    seen = changes(lines)
    assert seen, "no compaction happened"
    check_run(ws, out.run_id, p.requests)
    shapes = [r.env.data["conversation"] for r in lines if r.kind_name == "prompt_shape_compared"]
    assert "rewritten" in shapes
    print(seen)
    assert all(k in seen[0] for k in ("bytes_added", "bytes_removed", "tokens_added", "tokens_removed", "revision_before", "revision_after"))
    ws.close()
