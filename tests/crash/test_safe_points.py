"""Cancel and steer at every safe point of a scripted run with parallel waves.

A reference run is made once; then, for every line k of it, the same session is run again and
the person cancels it, or steers it, right after line k is written (an `on_event` hook sets the
cancel event or puts the words on the steer queue). That reaches every safe point (DESIGN.md §5)
and every in-flight moment: the model answering, a wave running, between two calls of a wave.

Every run must end frozen with a history valid in all three dialects: each request rebuilt from
the ledger and rendered as Anthropic Messages, OpenAI Chat and OpenAI Responses passes the
validator, and request n+1 extends request n byte-for-byte (a steer never edits a sent message).
A steer recorded is delivered to the model by a later request; a steer sent while the model
answers lands after that turn's tool results.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from crash_support import rendered_requests, request_problems, structure_problems

from runfold.api import Workspace
from runfold.core.records import Record
from runfold.providers.scripted import ScriptedProvider


def _use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}


SESSION: list[dict[str, Any]] = [
    {
        "content": [
            {"kind": "text", "text": "three at once"},
            _use("c1", "read_file", {"path": "notes.txt"}),
            _use("c2", "write_file", {"path": "out.txt", "content": "one\n"}),
            _use("c3", "list_dir", {"path": "."}),
        ],
        "delay_ms": 5,
    },
    {
        "content": [
            _use("c4", "edit_file", {"path": "out.txt", "old": "one", "new": "two"}),
            _use("c5", "read_file", {"path": "out.txt"}),
            _use("c6", "search", {"pattern": "alpha"}),
        ],
        "delay_ms": 5,
    },
    {"content": [{"kind": "text", "text": "all done"}], "delay_ms": 5},
    {"content": [{"kind": "text", "text": "noted, nothing more to do"}]},  # the turn a late steer adds
]

STEER = "please also keep a copy of notes"


def _run(ws: Workspace, dialect: str, k: int | None, action: str) -> tuple[str, list[str]]:
    """Run SESSION; right after the run's line k (0-based) is written, cancel or steer.
    Returns the run id and the kinds of the run's lines as they were written."""
    seen: list[str] = []

    async def main() -> str:
        cancel = asyncio.Event()
        steers: asyncio.Queue[str] = asyncio.Queue()

        def on_event(rec: Record) -> None:
            seen.append(rec.kind_name)
            if len(seen) - 1 == k:
                if action == "cancel":
                    cancel.set()
                else:
                    steers.put_nowait(STEER)

        out = await ws.arun(
            "do the three things",
            model=ScriptedProvider.of(SESSION, dialect=dialect),
            on_event=on_event,
            cancel=cancel,
            steers=steers,
        )
        assert out.error is None, out.reason
        return out.run_id

    return asyncio.run(main()), seen


@pytest.fixture(scope="module", params=["anthropic", "openai-chat", "openai-responses"])
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _workspace(root: Path) -> Workspace:
    ws = Workspace.init(root)
    (root / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    return ws


def _check(ws: Workspace, run: str, where: str) -> None:
    problems = structure_problems(ws, run) + request_problems(ws, run)
    assert not problems, f"{where}: {problems}"
    assert ws.replay(run).ok, where


def test_cancel_at_every_line(tmp_path: Path, dialect: str) -> None:
    ws = _workspace(tmp_path / "ws")
    reference, kinds = _run(ws, dialect, None, "cancel")
    _check(ws, reference, "reference")
    frozen = 0
    for k in range(len(kinds)):
        run, _ = _run(ws, dialect, k, "cancel")
        where = f"cancel after line {k} ({kinds[k]})"
        _check(ws, run, where)
        lines = ws.records(run=run)
        completion = lines[-1].env.data["completion"]
        if k < len(kinds) - 2:  # before handoff_written: a safe point follows, the cancel is taken
            assert completion == "cancelled", where
            assert [r.kind_name for r in lines[-3:]] == ["cancel_received", "handoff_written", "run_frozen"]
            frozen += 1
        # a call that never started has no line; one that started has exactly one result
        started = {r.env.data["id"] for r in lines if r.kind_name == "tool_called"}
        assert started <= {f"c{i}" for i in range(1, 7)}, where
    assert frozen >= 20


def test_steer_at_every_line(tmp_path: Path, dialect: str) -> None:
    ws = _workspace(tmp_path / "ws")
    _, kinds = _run(ws, dialect, None, "steer")
    delivered = 0
    for k in range(len(kinds)):
        run, _ = _run(ws, dialect, k, "steer")
        where = f"steer after line {k} ({kinds[k]})"
        _check(ws, run, where)
        lines = ws.records(run=run)
        steered = [r for r in lines if r.kind_name == "steer_received"]
        if not steered:
            # only after the last safe point (the final reply is in and the run is freezing)
            assert k >= kinds.index("model_returned", len(kinds) - 6), where
            continue
        (steer,) = steered
        assert steer.env.data == {"source": "user", "text": STEER}, where
        # delivered: a later request carries the words, as the person's
        later = [r for r in rendered_requests(ws, run) if r.seq > steer.seq]
        assert later, f"{where}: the steer was recorded but no request followed"
        assert any(STEER in json.dumps(r.bodies[dialect]) for r in later), where
        assert lines[-1].env.data["completion"] == "done", where
        delivered += 1
    assert delivered >= len(kinds) - 4


def test_steer_while_the_model_answers_lands_after_the_tool_results(tmp_path: Path, dialect: str) -> None:
    ws = _workspace(tmp_path / "ws")
    _, kinds = _run(ws, dialect, None, "steer")
    for k in [i for i, kind in enumerate(kinds) if kind == "model_called"][:2]:
        run, _ = _run(ws, dialect, k, "steer")
        lines = ws.records(run=run)
        kinds_after = [r.kind_name for r in lines]
        steer_at = kinds_after.index("steer_received")
        # written at the safe point after the reply, before its wave ...
        assert kinds_after[steer_at - 1] == "model_returned"
        # ... and in the next request it comes after every result of that wave
        steer_seq = lines[steer_at].seq
        nxt = next(r for r in rendered_requests(ws, run) if r.seq > steer_seq)
        body = nxt.bodies["anthropic"]
        last_user = body["messages"][-1]
        assert last_user["role"] == "user"
        parts = [b["type"] for b in last_user["content"]]
        texts = [i for i, b in enumerate(last_user["content"]) if b["type"] == "text" and STEER in b["text"]]
        assert texts and parts[: texts[0]] and all(p == "tool_result" for p in parts[: texts[0]]), parts
        assert parts.count("tool_result") == 3
