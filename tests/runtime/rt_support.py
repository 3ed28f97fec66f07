"""Helpers for the runtime tests: a fresh workspace, scripted replies, and the checks
every finished run must pass (verified ledger, handoff then freeze, replay byte-exact)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runfold.api import Workspace
from runfold.core.fold import fold_run
from runfold.core.kinds import Kind
from runfold.core.records import Record
from runfold.runtime import ReplayReport, RunOutcome


def text(t: str, **extra: Any) -> dict[str, Any]:
    """A scripted reply with one text block."""
    return {"content": [{"kind": "text", "text": t}], **extra}


def call(cid: str, name: str, args: dict[str, Any] | str, **extra: Any) -> dict[str, Any]:
    """A scripted reply with one tool call (arguments as JSON text)."""
    return calls([(cid, name, args)], **extra)


def calls(
    items: Sequence[tuple[str, str, dict[str, Any] | str]], say: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A scripted reply with several tool calls (one wave), optionally preceded by text."""
    content: list[dict[str, Any]] = [] if say is None else [{"kind": "text", "text": say}]
    for cid, name, args in items:
        content.append(
            {
                "kind": "tool_use",
                "id": cid,
                "name": name,
                "input": args if isinstance(args, str) else json.dumps(args),
            }
        )
    return {"content": content, **extra}


def run_lines(ws: Workspace, run: str) -> list[Record]:
    return ws.records(run=run)


def kinds(ws: Workspace, run: str) -> list[str]:
    return [r.kind_name for r in run_lines(ws, run)]


def check_finished(ws: Workspace, out: RunOutcome) -> ReplayReport:
    """The invariants of every finished run; returns its replay report."""
    report = ws.verify()
    assert report.lines == ws.records()[-1].seq + 1
    lines = run_lines(ws, out.run_id)
    assert [r.kind_name for r in lines[-2:]] == ["handoff_written", "run_frozen"]
    assert lines[-1].seq == out.frozen_seq
    fold_run(ws.lineage_lines(out.run_id), out.run_id)  # the fold accepts every line
    if out.completion == "done":
        own = {r.seq: r.kind_name for r in lines}
        assert out.evidence, "done must cite evidence"
        for ev in out.evidence:
            assert own.get(ev.seq) == ev.kind and ev.kind in ("model_returned", "tool_result")
    replay = ws.replay(out.run_id)
    assert replay.ok, replay.summary()
    called = [r for r in lines if r.known and r.kind is Kind.MODEL_CALLED]
    assert replay.requests == len(called)
    return replay
