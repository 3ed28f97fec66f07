"""Failures of the machine (a path of the wrong kind, input nested too deeply) are §11 errors
with an exit code, never an "internal error"."""

from __future__ import annotations

import shutil
from pathlib import Path

from cli_support import run_cli


def test_a_file_where_the_index_directory_belongs_is_storage_fatal(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert run_cli("init", "--workspace", ws, cwd=tmp_path).code == 0
    index = ws / ".runfold" / "index"
    shutil.rmtree(index, ignore_errors=True)
    index.write_text("not a directory")
    before = sorted(p.read_bytes() for p in (ws / ".runfold" / "ledger").iterdir())
    res = run_cli("show", "0", "-w", ws, cwd=tmp_path)
    assert res.code == 3, res.out + res.err
    assert res.err.startswith("E_STORAGE_FATAL: cannot use the file")
    assert "internal error" not in res.err and "Traceback" not in res.err
    assert sorted(p.read_bytes() for p in (ws / ".runfold" / "ledger").iterdir()) == before


def test_input_nested_too_deeply_is_invalid_args(tmp_path: Path) -> None:
    body = tmp_path / "deep.json"
    body.write_text('{"messages":' + "[" * 3000 + "]" * 3000 + "}")
    res = run_cli("validate", body, cwd=tmp_path)
    assert res.code in (1, 2), res.out + res.err
    assert "internal error" not in res.err and "Traceback" not in res.err
