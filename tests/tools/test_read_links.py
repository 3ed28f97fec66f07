"""The read gate holds against hard links: a name inside the room for a file outside the workspace
or for a ledger segment reads nothing through `read_file`, `search` or `edit_file`; a file whose
names all lie inside the workspace reads as before (a write through any hard link is refused by the
write boundary). Refusals carry the three-part gate."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from runfold.api import Workspace
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.tools import Tool, ToolContext
from runfold.tools.builtin import EDIT_FILE, READ_FILE, SEARCH

SECRET = "outside secret 4711\n"


def call(t: Tool, ctx: ToolContext, **args: Any) -> dict[str, Any]:
    return asyncio.run(t.invoke(t.validate(args), ctx))


def denied(t: Tool, ctx: ToolContext, code: ErrorCode = ErrorCode.GATE_DENIED, **args: Any) -> RunfoldError:
    with pytest.raises(RunfoldError) as info:
        call(t, ctx, **args)
    err = info.value
    assert err.code is code, err
    assert err.gate is not None and err.gate.rule and err.gate.violation and err.gate.alternative
    assert "4711" not in str(err.to_data())
    return err


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    f = tmp_path / "outside.txt"  # next to the workspace, not in it
    f.write_text(SECRET)
    return f


def test_a_hard_link_to_a_file_outside_the_workspace_reads_nothing(
    ctx: ToolContext, room: Path, outside: Path
) -> None:
    os.link(outside, room / "looks-local.txt")
    err = denied(READ_FILE, ctx, path="looks-local.txt")
    assert "hard link" in err.gate.violation and "2 names" in err.gate.violation  # type: ignore[union-attr]
    denied(SEARCH, ctx, pattern="secret", path="looks-local.txt")
    found = call(SEARCH, ctx, pattern="secret")
    assert found["matches"] == [] and found["skipped"] == 1
    # a write through a hard link is refused by the write boundary before anything is read
    denied(EDIT_FILE, ctx, ErrorCode.OUTSIDE_WRITE_DOMAIN, path="looks-local.txt", old="nothing like it", new="x")


def test_a_hard_link_to_a_ledger_segment_reads_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    (segment,) = (root / ".runfold" / "ledger").glob("ledger-*.jsonl")
    (root / "work").mkdir()
    os.link(segment, root / "work" / "notes.jsonl")
    ctx = ToolContext(workspace=root, room="work")
    err = denied(READ_FILE, ctx, path="notes.jsonl")
    assert ".runfold" in err.gate.violation  # type: ignore[union-attr]
    assert call(SEARCH, ctx, pattern="workspace_initialized")["matches"] == []
    denied(SEARCH, ctx, pattern="workspace_initialized", path="notes.jsonl")


def test_a_symlink_to_a_hard_link_outside_reads_nothing(ctx: ToolContext, room: Path, outside: Path, ws: Path) -> None:
    os.link(outside, ws / "README.copy")
    (room / "via").symlink_to(ws / "README.copy")
    denied(READ_FILE, ctx, path="via")
    assert call(SEARCH, ctx, pattern="secret")["matches"] == []


def test_hard_links_with_every_name_inside_the_workspace_read(ctx: ToolContext, room: Path, ws: Path) -> None:
    (room / "a.txt").write_text("shared text\n")
    os.link(room / "a.txt", ws / "lab" / "other" / "b.txt")
    assert call(READ_FILE, ctx, path="a.txt")["content"] == "shared text\n"
    assert [m["path"] for m in call(SEARCH, ctx, pattern="shared", path="..")["matches"]] == [
        "../other/b.txt",
        "a.txt",
    ]
    # writing would change `lab/other/b.txt` too, outside the room: the write boundary refuses it
    denied(EDIT_FILE, ctx, ErrorCode.OUTSIDE_WRITE_DOMAIN, path="a.txt", old="shared", new="own")
    assert (ws / "lab" / "other" / "b.txt").read_text() == "shared text\n"
