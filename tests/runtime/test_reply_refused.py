"""A model reply the conversation cannot take — a tool call with an empty id or name, a reused
id — is refused before anything of it is recorded or run, and the model is asked again (a
`watchdog_fired` `malformed_reply` back-off); the run goes on and every `continue` works."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from runfold.api import Workspace
from runfold.providers.scripted import ScriptedProvider
from runfold.runtime.retry import RetryPolicy


def _use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


def _text(t: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": t}]}


@pytest.mark.parametrize(
    "bad",
    [
        _use("", "exec", {"command": "echo bad > bad.txt"}),
        _use("   ", "exec", {"command": "echo bad > bad.txt"}),
        _use("c9", "", {"command": "echo bad > bad.txt"}),
    ],
    ids=["empty-id", "blank-id", "empty-name"],
)
def test_a_tool_call_with_an_empty_id_or_name_is_refused_and_the_run_goes_on(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    ws = Workspace.init(tmp_path / "ws")
    script = [
        {"content": [bad]},
        {"content": [_use("c1", "exec", {"command": "echo good > good.txt"})]},
        _text("done"),
    ]

    async def main() -> Any:
        return await ws.arun(
            "write a file",
            model=ScriptedProvider.of(script),
            retry=RetryPolicy(base_ms=1, cap_ms=2),
        )

    out = asyncio.run(main())
    assert out.completion == "done", out.reason
    assert not (ws.root / "bad.txt").exists(), "the refused call ran"
    assert (ws.root / "good.txt").exists()
    lines = ws.records(run=out.run_id)
    assert [r.env.data["id"] for r in lines if r.kind_name == "tool_called"] == ["c1"]
    fired = [r.env.data for r in lines if r.kind_name == "watchdog_fired"]
    assert [f["reason"] for f in fired] == ["malformed_reply"]
    assert fired[0]["detail"].startswith("content[0] is a tool call with an empty ")  # says what was wrong
    assert ws.replay(out.run_id).ok
    # the run can be continued (no E_WIRE_MISMATCH on every continue)
    nxt = asyncio.run(ws.arun("", continues=out.run_id, model=ScriptedProvider.of([_text("still ok")])))
    assert nxt.completion == "done", nxt.reason


def test_replies_refused_until_the_attempts_run_out_freeze_the_run_with_a_clear_error(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    bad = {"content": [_use("", "exec", {"command": "true"})]}

    async def main() -> Any:
        return await ws.arun(
            "x", model=ScriptedProvider.of([bad] * 3), retry=RetryPolicy(base_ms=1, cap_ms=2, max_attempts=3)
        )

    out = asyncio.run(main())
    assert out.completion == "failed" and out.error is not None
    assert out.error.code.value == "E_PROVIDER" and "empty id" in out.error.action
    assert not ws.records(run=out.run_id, kind="model_returned")
    assert ws.replay(out.run_id).ok
