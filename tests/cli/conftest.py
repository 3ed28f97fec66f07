"""Fixtures of the CLI tests; the helpers they share live in cli_support.py (a conftest is
not importable by name when several test folders have one)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_support import GOLDEN


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    """A writable copy of the foreign sprawling ledger (18 lines, format v1)."""
    dest = tmp_path / "golden" / GOLDEN.name
    dest.parent.mkdir()
    shutil.copyfile(GOLDEN, dest)
    dest.chmod(0o644)
    return dest
