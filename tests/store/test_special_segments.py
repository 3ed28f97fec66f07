"""A ledger segment that is not a regular file (a FIFO, a symlink to /dev/zero) is refused with
E_STORAGE_FATAL naming the path by `verify`, `log` and `run`: reading it would block or never end,
so nothing may wait on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runfold.api import Workspace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    Workspace.init(ws).close()
    return ws


def _runfold(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runfold", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_special_segment_is_refused_naming_it(tmp_path: Path, kind: str) -> None:
    ws = _workspace(tmp_path)
    special = ws / ".runfold" / "ledger" / f"ledger-{1:020d}.jsonl"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        special.symlink_to("/dev/zero")
    segments = sorted((ws / ".runfold" / "ledger").iterdir())
    before = {p.name: p.read_bytes() for p in segments if p.is_file() and not p.is_symlink() and p != special}
    for args in (["verify", str(ws)], ["log", "-w", str(ws)], ["run", "hi", "--model", f"script:{EXAMPLES / 'garden-session.jsonl'}", "-w", str(ws)]):
        out = _runfold(*args, cwd=tmp_path)
        assert out.returncode == 3, (args, out.stdout, out.stderr)
        assert out.stderr.startswith("E_STORAGE_FATAL"), out.stderr
        assert special.name in out.stderr
    after = {p.name: p.read_bytes() for p in segments if p.is_file() and not p.is_symlink() and p != special}
    assert after == before
