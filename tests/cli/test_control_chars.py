"""Escape sequences in a model reply, a tool's output or the person's words never reach the
terminal raw: every human-readable printer shows control characters visibly (newlines and tabs
kept) and rich markup in recorded text prints literally, while `--json` keeps the exact text.

A real `runfold run` (scripted model, a real `exec`) records a title-setting and screen-clearing
sequence three ways; the live view, `log`, `show`, `conversation` and `runs` print it, in plain
and in forced-terminal mode.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli

from runfold.api import Workspace
from runfold.cli.visible import visible

HOSTILE = "\x1b]0;pwned\x07\x1b[2J"
SHOWN = "␛]0;pwned␇␛[2J"
MARKUP = "[bold red]loud[/bold red]"


def _raw_sequences(text: str) -> list[str]:
    return [s for s in ("\x1b]0;", "\x1b[2J", "\x07", "\x9b") if s in text]


@pytest.fixture(scope="module")
def hostile_ws(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("hostile") / "ws"
    Workspace.init(root).close()
    command = "printf '\\033]0;pwned\\007\\033[2J [bold red]loud[/bold red]'"
    script = root.parent / "s.jsonl"
    use = {"kind": "tool_use", "id": "x1", "name": "exec", "input": json.dumps({"command": command})}
    replies = [
        {"content": [{"kind": "text", "text": f"look {HOSTILE} {MARKUP}"}, use]},
        {"content": [{"kind": "text", "text": f"done {HOSTILE}\tend"}]},
    ]
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    res = run_cli("run", f"task {HOSTILE} {MARKUP}", "--model", f"script:{script}", cwd=root, process=True)
    assert res.code == 0, res.out + res.err
    (root / "live.txt").write_text(res.out + res.err)
    return root, Workspace.open(root).runs()[-1]


def test_the_live_view_shows_control_characters_visibly(hostile_ws: tuple[Path, str]) -> None:
    printed = (hostile_ws[0] / "live.txt").read_text()
    assert not _raw_sequences(printed), "the live view printed raw escapes"
    assert SHOWN in printed


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize(
    "args",
    [("log",), ("log", "--limit", "3"), ("show", "5"), ("show", "7"), ("conversation",), ("runs",)],
)
def test_readers_show_control_characters_visibly(
    hostile_ws: tuple[Path, str], args: tuple[str, ...], force: bool
) -> None:
    root, _run = hostile_ws
    env = {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "NO_COLOR": ""} if force else None
    res = run_cli(*args, cwd=root, process=True, env=env)
    assert res.code == 0, res.out + res.err
    assert not _raw_sequences(res.out + res.err), f"{args} printed raw escapes"


def test_the_conversation_shows_each_source_visibly_and_markup_literally(hostile_ws: tuple[Path, str]) -> None:
    root, _run = hostile_ws
    out = run_cli("conversation", cwd=root, process=True).out
    assert out.count(SHOWN) >= 3, out  # the task, the reply, the tool's output
    assert MARKUP in out


def test_json_keeps_the_exact_text(hostile_ws: tuple[Path, str]) -> None:
    root, _run = hostile_ws
    res = run_cli("log", "--json", cwd=root, process=True)
    assert res.code == 0
    texts = [line for line in res.out.splitlines() if "\\u001b]0;pwned" in line]
    assert len(texts) >= 4 and all(any(HOSTILE in s for s in _strings(json.loads(t))) for t in texts)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value, *_strings(json.loads(value))] if value.startswith("{") else [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_visible_keeps_newlines_and_tabs_and_marks_every_other_control() -> None:
    assert visible("a\tb\nc") == "a\tb\nc"
    assert visible(HOSTILE) == SHOWN
    assert visible("\r\x00\x7f\x9b") == "␍␀␡�"
    assert visible("plain ünïcode ✓") == "plain ünïcode ✓"


def test_emoji_codes_in_paths_and_text_print_as_they_are(tmp_path: Path) -> None:
    room = tmp_path / "a:smile:b"
    room.mkdir()
    for args in (("init", "-w", room), ("verify", room), ("log", "-w", room)):
        r = run_cli(*args, cwd=tmp_path)
        assert r.code == 0, r.err
        assert "😄" not in r.out + r.err, args
    assert str(room) in run_cli("init", "-w", room / "x:+1:y", cwd=tmp_path).out
