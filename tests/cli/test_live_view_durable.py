"""The live view of `runfold run` shows a line only once it is durable: when the disk refuses
the batch holding a `done` reply, the reply is never printed as if it had been recorded."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from cli_support import run_cli

import runfold.store.ledger as ledger_module
from runfold.api import Workspace
from runfold.store.ledger import WriterIO


def test_a_reply_whose_line_never_became_durable_is_not_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"content": [{"kind": "text", "text": "THE-FINAL-ANSWER"}]}) + "\n")

    def full_disk(fd: int, data: bytes, offset: int) -> int:
        if b'"kind":"model_returned"' in data:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.pwrite(fd, data, offset)

    monkeypatch.setattr(ledger_module, "WriterIO", lambda: WriterIO(pwrite=full_disk))
    res = run_cli("run", "answer", "--model", f"script:{script}", cwd=root)
    assert res.code != 0
    assert "E_STORAGE_FATAL" in res.out + res.err
    assert "THE-FINAL-ANSWER" not in res.out + res.err
    monkeypatch.undo()
    assert not Workspace.open(root).records(kind="model_returned")
