"""The live view of `runfold run`, fed real ledger lines: counters, cost that stays unknown once
a price is unknown, the plain lines a log reads, and the rich status bar on a terminal."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from runfold.api import Workspace
from runfold.cli.live import LiveView
from runfold.core.figures import usd
from runfold.providers.scripted import ScriptedProvider


def test_usd_is_exact_and_unknown_is_never_zero() -> None:
    assert usd(0) == "$0"
    assert usd(1) == "$0.000001"
    assert usd(12_345_678) == "$12.345678"
    assert usd(-5) == "-$0.000005"
    assert usd(None) == "unknown"


def run_with_view(tmp_path: Path, view: LiveView, model: str = "script") -> None:
    ws = Workspace.init(tmp_path / "ws")
    (tmp_path / "ws" / "a.md").write_text("hello\n")
    call = {"kind": "tool_use", "id": "c1", "name": "read_file", "input": json.dumps({"path": "a.md"})}
    provider = ScriptedProvider.of(
        [
            {"content": [{"kind": "text", "text": "Reading."}, call], "usage": {"input": 100, "output": 5}},
            {
                "content": [{"kind": "text", "text": "It says hello."}],
                "usage": {"input": 120, "output": 4, "cache_read": 90},
            },
        ],
        model=model,
    )
    with view:
        out = ws.run("read a.md", model=provider, on_event=view.on_event, on_delta=view.on_delta)
    assert out.completion == "done"


def test_plain_lines_and_counters(tmp_path: Path) -> None:
    buf = io.StringIO()
    view = LiveView(Console(file=buf, width=200, force_terminal=False), fancy=False)
    run_with_view(tmp_path, view)
    text = buf.getvalue()
    lines = text.splitlines()
    assert lines[0].split("] ", 1)[1].startswith("run ")
    assert any('reply "Reading." · 1 tool call · 100 in / 5 out tokens · $0' in x for x in lines)
    assert any('→ read_file "a.md"' in x for x in lines)
    assert any("(90 cached)" in x for x in lines)
    assert (view.turns, view.tool_calls, view.input_tokens, view.output_tokens, view.cache_read) == (
        2,
        1,
        220,
        9,
        90,
    )
    assert view.billed_usd_micros == 0
    assert "turn 2 · 1 tool call · 220 in / 9 out tokens · cost $0" in view.status()


def test_unknown_price_makes_the_total_unknown(tmp_path: Path) -> None:
    buf = io.StringIO()
    view = LiveView(Console(file=buf, width=200, force_terminal=False), fancy=False)
    run_with_view(tmp_path, view, model="no-such-model-price")
    assert view.billed_usd_micros is None
    assert "cost unknown" in view.status()
    assert "· unknown" in buf.getvalue()


def test_rich_live_on_a_terminal_keeps_the_log_lines(tmp_path: Path) -> None:
    buf = io.StringIO()
    view = LiveView(Console(file=buf, width=120, force_terminal=True, color_system=None), fancy=True)
    run_with_view(tmp_path, view)
    text = buf.getvalue()
    assert "→ read_file" in text and "turn 2 · reply" in text


def test_a_call_line_has_single_spaces_with_or_without_a_subject() -> None:
    buf = io.StringIO()
    view = LiveView(Console(file=buf, width=200, force_terminal=False), fancy=False)
    view._on_tool_called(None, {"name": "wait_for_reply", "effect": "write"})  # type: ignore[arg-type]
    view._on_tool_called(None, {"name": "write_file", "subject": "a.md", "effect": "write"})  # type: ignore[arg-type]
    view._on_tool_called(None, {"name": "list_dir", "subject": ".", "effect": "read"})  # type: ignore[arg-type]
    view._on_tool_called(None, {"name": "exec", "subject": "rm todo.md", "effect": "write"})  # type: ignore[arg-type]
    shown = [line.split("] ", 1)[1] for line in buf.getvalue().splitlines()]
    assert shown == [
        "  → wait_for_reply (writes)", '  → write_file "a.md" (writes)', '  → list_dir "."', '  → exec "rm todo.md" (exec)'
    ]  # fmt: skip
