"""`runfold import` on the command line (auto detection says what it found, --json), the Claude
Code subagent files becoming child runs, and the folds that read imported runs like native ones."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from import_support import FIXTURES

from runfold.api import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_support import run_cli

HELLO = FIXTURES / "claude-code-hello-world.jsonl"


def test_cli_import_auto_says_what_it_detected(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    res = run_cli("import", "auto", HELLO, "-w", ws.root, cwd=tmp_path)
    assert res.code == 0, res
    assert "detected as claude-code" in res.out
    assert "4 replies, 2 tool calls, 2 results" in res.out
    # the `next:` commands give the whole id: a prefix the next fork or continue shares turns ambiguous
    (imported,) = ws.runs()
    assert f"next: runfold conversation {imported} " in res.out and f"runfold continue {imported} " in res.out
    res = run_cli(
        "import", "openhands", FIXTURES / "openhands-fix-add.json", "-w", ws.root, "--json", cwd=tmp_path
    )
    assert res.code == 0, res
    data = json.loads(res.out)
    assert data["format"] == "openhands" and data["detected"] is False
    (run,) = data["runs"]
    assert (run["replies"], run["calls"], run["results"], run["lost"]) == (4, 5, 4, 1)
    assert run["map"].startswith("cas:b3-")


def test_cli_import_unknown_format_lists_the_formats(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    res = run_cli("import", "gemini", HELLO, "-w", ws.root, cwd=tmp_path)
    assert res.code != 0
    assert "claude-code" in res.err and "openhands" in res.err


def _subagent_lines(session_id: str) -> str:
    rows = [
        {
            "type": "user",
            "uuid": "a-1",
            "parentUuid": None,
            "isSidechain": True,
            "agentId": "a1",
            "sessionId": session_id,
            "version": "2.1.14",
            "timestamp": "2026-01-21T06:20:40.000Z",
            "message": {"role": "user", "content": "List the files in /tmp."},
        },
        {
            "type": "assistant",
            "uuid": "a-2",
            "parentUuid": "a-1",
            "isSidechain": True,
            "agentId": "a1",
            "sessionId": session_id,
            "version": "2.1.14",
            "timestamp": "2026-01-21T06:20:41.000Z",
            "message": {
                "id": "msg_sub_1",
                "model": "claude-haiku-4-5",
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_sub_1", "name": "Bash", "input": {"command": "ls /tmp"}}
                ],
                "usage": {"input_tokens": 5, "output_tokens": 9},
            },
        },
        {
            "type": "user",
            "uuid": "a-3",
            "parentUuid": "a-2",
            "isSidechain": True,
            "agentId": "a1",
            "sessionId": session_id,
            "version": "2.1.14",
            "timestamp": "2026-01-21T06:20:42.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_sub_1", "content": "hello.sh"}],
            },
        },
        {
            "type": "assistant",
            "uuid": "a-4",
            "parentUuid": "a-3",
            "isSidechain": True,
            "agentId": "a1",
            "sessionId": session_id,
            "version": "2.1.14",
            "timestamp": "2026-01-21T06:20:43.000Z",
            "message": {
                "id": "msg_sub_2",
                "model": "claude-haiku-4-5",
                "role": "assistant",
                "content": [{"type": "text", "text": "One file: hello.sh."}],
                "usage": {"input_tokens": 7, "output_tokens": 6},
            },
        },
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _session_with_subagent(tmp_path: Path) -> Path:
    """The Hello World session copied where Claude Code keeps it, with one subagent file beside it."""
    session_id = json.loads(HELLO.read_text().splitlines()[1])["sessionId"]
    main = tmp_path / "proj" / f"{session_id}.jsonl"
    main.parent.mkdir()
    shutil.copy(HELLO, main)
    sub = main.with_suffix("") / "subagents" / "agent-a1.jsonl"
    sub.parent.mkdir(parents=True)
    sub.write_text(_subagent_lines(session_id))
    return main


def test_claude_code_subagent_files_become_child_runs(tmp_path: Path) -> None:
    main = _session_with_subagent(tmp_path)
    ws = Workspace.init(tmp_path / "ws")
    report = ws.import_session(main)
    parent, child = report.runs
    assert parent.session == "main" and child.session == f"subagent {main.stem}/subagents/agent-a1.jsonl"
    started = ws.records(run=child.run)[0]
    assert started.env.data["parent"] == parent.run
    assert started.env.data["task"] == "List the files in /tmp."
    assert (child.replies, child.calls, child.results) == (2, 1, 1)
    assert ws.request_at(child.run).verdicts == {"anthropic": [], "openai-chat": [], "openai-responses": []}
    tree = ws.run_tree()
    assert any(child.run in repr(node) for node in tree)


def test_why_log_and_context_read_an_imported_run(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    (run,) = ws.import_session(HELLO).runs
    report = ws.why(run.run)
    assert report is not None
    window = ws.context(run.run)
    assert window is not None
    res = run_cli("log", "--run", run.run, "-w", ws.root, cwd=tmp_path)
    assert res.code == 0 and "session_imported" in res.out and "claude-code" in res.out
    res = run_cli("why", run.run, "-w", ws.root, cwd=tmp_path)
    assert res.code == 0, res


def test_cli_import_names_runs_by_a_prefix_unique_in_the_workspace(tmp_path: Path) -> None:
    # run ids made within ~65 s share their first 8 characters: the id the output prints (and
    # its `next: runfold conversation ID` hint) must resolve among every run, not only the new one
    ws = Workspace.init(tmp_path / "ws")
    ws.import_session(HELLO)
    ws.close()
    res = run_cli("import", "auto", HELLO, "-w", ws.root, cwd=tmp_path)
    assert res.code == 0, res
    shown = res.out.split("next: runfold conversation ", 1)[1].split()[0]
    again = Workspace.open(ws.root)
    assert len([r for r in again.runs() if r.startswith(shown)]) == 1, shown
    again.close()
    res = run_cli("conversation", shown, "-w", ws.root, cwd=tmp_path)
    assert res.code == 0, res


def test_latest_run_passes_over_an_imported_subagent(tmp_path: Path) -> None:
    # a subagent is a child its session's agent handed a task to: `runfold replay` / `run -c`
    # without RUN mean the main session, not the subagent imported after it
    main = _session_with_subagent(tmp_path)
    ws = Workspace.init(tmp_path / "ws")
    parent, child = ws.import_session(main).runs
    assert ws.latest_run() == parent.run
    # a person's fork of the subagent is the person's own run again
    fork = ws.fork(child.run, ws.records(run=child.run)[-1].env.seq)
    assert ws.latest_run() == fork.new_run
