"""Fixtures for the runtime tests (helpers live in rt_support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runfold.api import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A fresh workspace with a small file tree: `notes.txt`, `work/` (a room) and `other/`."""
    root = tmp_path / "ws"
    w = Workspace.init(root)
    (root / "notes.txt").write_text("alpha\nbeta\n")
    (root / "work").mkdir()
    (root / "work" / "todo.md").write_text("- one\n")
    (root / "other").mkdir()
    return w
