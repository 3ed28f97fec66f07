"""Text a tool returns that is not valid Unicode (a lone surrogate, a file name's undecodable
bytes) is replaced by U+FFFD and the replacement counted in the result; the call is answered
and the run goes on (the ledger holds only valid UTF-8, DESIGN.md §3)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from runfold.api import Workspace
from runfold.providers.scripted import ScriptedProvider
from runfold.tools.results import INVALID_TEXT_KEY


def odd(n: int) -> str:
    """Return odd text.

    Args:
        n: Unused.
    """
    return "a\ud800b"


def odd_error(n: int) -> str:
    """Fail with odd text.

    Args:
        n: Unused.
    """
    raise ValueError("bad \udc80 value")


def _run(ws: Workspace, name: str, args: dict[str, Any]) -> dict[str, Any]:
    p = ScriptedProvider.of(
        [
            {"content": [{"kind": "tool_use", "id": "c1", "name": name, "input": json.dumps(args)}]},
            {"content": [{"kind": "text", "text": "done"}]},
        ]
    )
    out = ws.run("look", model=p, tools=[odd, odd_error])
    assert out.completion == "done", out.reason
    assert ws.replay(out.run_id).ok
    (res,) = ws.records(run=out.run_id, kind="tool_result")
    return dict(res.env.data)


def test_a_lone_surrogate_in_a_result_is_replaced_and_counted(tmp_path: Path) -> None:
    data = _run(Workspace.init(tmp_path / "ws"), "odd", {"n": 1})
    assert data["result"] == {"value": "a\ufffdb", INVALID_TEXT_KEY: 1}


def test_a_lone_surrogate_in_an_error_is_replaced_and_counted(tmp_path: Path) -> None:
    data = _run(Workspace.init(tmp_path / "ws"), "odd_error", {"n": 1})
    assert "\ufffd" in data["error"]["recovery"] and data["error"][INVALID_TEXT_KEY] >= 1


@pytest.mark.skipif(sys.platform != "linux", reason="undecodable file names")
def test_an_undecodable_file_name_in_list_dir(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    (ws.root / os.fsdecode(b"bad\xff.txt")).write_text("hi")
    data = _run(ws, "list_dir", {"path": "."})
    assert "bad\ufffd.txt" in json.dumps(data["result"], ensure_ascii=False)
    assert data["result"][INVALID_TEXT_KEY] == 1
