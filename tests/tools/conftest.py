"""Shared fixtures for the tool tests: a real workspace directory with a room."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfold.tools import ToolContext


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with `.runfold/`, a room `lab/room1` and a sibling room `lab/other`."""
    root = tmp_path / "ws"
    (root / ".runfold").mkdir(parents=True)
    (root / ".runfold" / "ledger.lock").write_text("")
    (root / "lab" / "room1").mkdir(parents=True)
    (root / "lab" / "other").mkdir(parents=True)
    (root / "lab" / "other" / "notes.md").write_text("other room\n")
    (root / "README.md").write_text("top\n")
    return root


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext(workspace=ws, room="lab/room1", run_id="0190a0b0-0000-7000-8000-000000000001")


@pytest.fixture
def room(ctx: ToolContext) -> Path:
    return ctx.room_dir
