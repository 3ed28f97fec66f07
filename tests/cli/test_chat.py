"""`runfold chat` in a real terminal (tmux) and with piped stdin: each message continues the
room's conversation as a successor run, `/fork` branches it, Ctrl-C cancels the turn in flight
while the session goes on, Ctrl-D ends it; the ledger verifies and every request replays."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runfold.api import Workspace
from runfold.cli.chat_cmds import PROMPT
from tmux_support import Pane

needs_tmux = pytest.mark.skipif(
    shutil.which("tmux") is None and os.environ.get("CI") != "true",
    reason="needs tmux (`.ci/run` installs it; CI never skips)",
)


def say(text: str, delay_ms: int = 0) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}], **({"delay_ms": delay_ms} if delay_ms else {})}


def write_script(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def lines_of(root: Path) -> list[dict[str, Any]]:
    with Workspace.open(root) as ws:
        return [json.loads(r.raw) for r in ws.records()]


def chat(root: Path, script: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    env.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "runfold", "chat", "--model", f"script:{script}", "-w", str(root), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _at_prompt(pane: Pane, timeout: float = 60) -> None:
    """Wait until the chat reads the person's next line (keys typed earlier may reach the
    terminal before the line editor reads them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = [line for line in pane.screen().splitlines() if line.strip()]
        if shown and shown[-1].strip() == PROMPT.strip():
            time.sleep(0.5)  # the prompt is drawn just before the line editor reads
            return
        time.sleep(0.2)
    raise AssertionError(f"no prompt; the pane shows:\n{pane.screen()}")


@needs_tmux
def test_chat_in_a_terminal_three_turns_a_fork_and_a_cancelled_turn(tmp_path: Path, pane_for: Any) -> None:
    root = Workspace.init(tmp_path / "ws").root
    (root / "garden").mkdir()
    script = write_script(
        tmp_path / "chat.jsonl",
        [
            say("Hello! What shall we plant?"),
            {"content": [{"kind": "tool_use", "id": "c1", "name": "list_dir", "input": "{\"path\": \".\"}"}]},
            say("There is one room: garden."),
            say("On this branch: basil."),
            say("this reply never comes", delay_ms=120_000),
            say("Still here after the cancel."),
        ],
    )
    command = f"{shlex.quote(sys.executable)} -m runfold chat --model script:{shlex.quote(str(script))} -w {shlex.quote(str(root))}"
    pane = pane_for(command, root)
    pane.wait_for("/help lists the commands")
    pane.type("hello there")
    pane.wait_for("Hello! What shall we plant?")
    pane.type("which rooms are there?")
    pane.wait_for("There is one room: garden.")
    pane.type("/fork")
    pane.wait_for("your next message continues the fork")
    pane.type("and on a branch?")
    pane.wait_for("On this branch: basil.")
    pane.type("take your time")
    pane.wait_for("turn 1 · 0 tool calls")  # the status bar: the turn is in flight (the model sleeps 120 s)
    pane.key("C-c")
    pane.wait_for("turn cancelled")
    pane.type("are you there?")
    pane.wait_for("Still here after the cancel.")
    pane.type("/runs")
    pane.wait_for("not started")  # `runfold runs`: the fork itself never ran, a successor carried it on
    _at_prompt(pane)
    pane.key("C-d")
    shown = pane.wait_for("EXITED=0")
    assert "session ended: 6 run(s)" in shown
    lines = lines_of(root)
    runs: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if line["run"] != "00000000-0000-0000-0000-000000000000":
            runs.setdefault(line["run"], []).append(line)
    order = list(runs)
    assert len(order) == 6, order
    first, second, fork, third, cancelled, last = (runs[r] for r in order)
    assert first[0]["data"]["opening"] == "with_person" and first[0]["data"]["task"] == "hello there"
    assert first[1]["kind"] == "session_opened" and first[1]["data"] == {"carried": False}
    assert second[0]["data"]["predecessor"] == order[0] and second[0]["data"]["task"] == "which rooms are there?"
    assert [line["kind"] for line in fork] == ["run_started", "run_forked"]
    assert fork[1]["data"]["from"] == order[1]
    assert third[0]["data"]["predecessor"] == order[2]
    assert [line["kind"] for line in cancelled][-3:] == ["cancel_received", "handoff_written", "run_frozen"]
    assert cancelled[-1]["data"]["completion"] == "cancelled"
    assert last[0]["data"]["predecessor"] == order[4] and last[-1]["data"]["completion"] == "done"
    with Workspace.open(root) as ws:
        assert ws.verify().lines == len(lines)
        for r in order:
            assert ws.replay(r).ok
        said = json.dumps(ws.fold(order[-1]).conversation.messages_view())
    # the last run's conversation holds every turn of its branch, the cancelled one included
    for words in ("hello there", "which rooms are there?", "and on a branch?", "take your time", "are you there?"):
        assert words in said
    assert subprocess.run([sys.executable, "-m", "runfold", "verify", "-w", str(root)], capture_output=True).returncode == 0


def test_piped_lines_are_messages_and_a_second_session_carries_the_room_on(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    (root / "docs").mkdir()
    script = write_script(tmp_path / "s.jsonl", [say("one"), say("two")])
    proc = chat(root, script, "first words\n\n/cost\nsecond words\n", "--room", "docs")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "you> first words" in out and "one" in out and "you> second words" in out and "two" in out
    assert "total: 1 replies" in out  # /cost ran `runfold cost` on the current run
    assert "session ended: 2 run(s)" in out
    first = [line for line in lines_of(root) if line["kind"] in ("run_started", "session_opened")]
    assert all(line.get("addr") == "docs" for line in first)
    # a second session in the room carries the last run on: session_opened names it, carried
    again = write_script(tmp_path / "again.jsonl", [say("three")])
    proc = chat(root, again, "third words\n", "--room", "docs")
    assert proc.returncode == 0, proc.stderr
    lines = lines_of(root)
    opened = [line for line in lines if line["kind"] == "session_opened"]
    starts = [line for line in lines if line["kind"] == "run_started"]
    assert len(opened) == 2 and opened[1]["data"]["carried"] is True
    assert opened[1]["data"]["from"] == {"run": starts[1]["run"], "at_seq": max(x["seq"] for x in lines if x["run"] == starts[1]["run"] and x["seq"] < opened[1]["seq"])}
    assert starts[2]["data"]["predecessor"] == starts[1]["run"]
    # --new starts afresh, naming what it did not carry
    proc = chat(root, write_script(tmp_path / "new.jsonl", [say("four")]), "fresh start\n", "--room", "docs", "--new")
    assert proc.returncode == 0, proc.stderr
    lines = lines_of(root)
    last_open = [line for line in lines if line["kind"] == "session_opened"][-1]
    assert last_open["data"]["carried"] is False and last_open["data"]["from"]["run"] == starts[2]["run"]
    assert [line for line in lines if line["kind"] == "run_started"][-1]["data"]["opening"] == "with_person"


def test_a_failed_turn_shows_its_error_the_session_goes_on_and_the_exit_code_says_so(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    script = write_script(tmp_path / "s.jsonl", [say("one")])  # a second turn finds the script used up
    proc = chat(root, script, "first words\nsecond words\n/runs\n")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "you> second words" in proc.stdout and "session ended: 2 run(s)" in proc.stdout
    assert "1 turn(s) of the session failed" in proc.stderr and "E_" in proc.stderr
    clean = chat(root, write_script(tmp_path / "ok.jsonl", [say("fine")]), "third words\n")
    assert clean.returncode == 0, clean.stderr


def test_chat_goes_through_the_server_that_owns_the_workspace(tmp_path: Path) -> None:
    from server.srv_support import make_workspace, start_server

    root = make_workspace(tmp_path / "ws")
    script = write_script(tmp_path / "s.jsonl", [say("served answer")])  # the server builds a provider per run
    srv = start_server(root)
    try:
        proc = chat(root, script, "hi there\n/runs\nagain\n")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        with srv.client() as c:
            served = {r["run"] for r in c.get("/runs").json()["runs"]}
    finally:
        srv.stop()
    assert proc.stdout.count("served answer") == 2 and "session ended: 2 run(s)" in proc.stdout
    lines = lines_of(root)
    starts = [line for line in lines if line["kind"] == "run_started"]
    assert {s["run"] for s in starts} <= served and len(starts) == 2
    opened = [line for line in lines if line["kind"] == "session_opened"]
    assert [(o["run"], o["data"]) for o in opened] == [(starts[0]["run"], {"carried": False})]
    assert starts[1]["data"]["predecessor"] == starts[0]["run"]
    with Workspace.open(root) as ws:
        assert ws.verify().lines == len(lines)
