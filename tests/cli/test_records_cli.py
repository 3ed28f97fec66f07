"""End-to-end tests of what the ledger records and what the run views read from it: the model a
successor or fork calls, forks never run, runs whose process died, the stall guard's stop, an
empty goal, RUN omitted, `run -` and `run -c`, `log --tail`, and arguments refused before anything
is created."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import Result, run_cli

from runfold.api import Workspace
from runfold.core.payloads import RunStarted
from runfold.core.records import Draft
from runfold.runtime.spec import new_run_id

README = Path(__file__).resolve().parents[2] / "README.md"


def text(t: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": t}]}


def call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}]}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    assert run_cli("init", "-w", root, cwd=tmp_path).code == 0
    (root / "notes.md").write_text("alpha\n", encoding="utf-8")
    return root


def script(root: Path, name: str, *entries: dict[str, Any], model: str | None = None) -> str:
    """A scripted-model file; `model` gives it a recording header naming that model."""
    path = root.parent / name
    lines = [json.dumps({"recorded": {"dialect": "anthropic", "model": model}})] if model else []
    lines += [json.dumps(e) for e in entries]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return f"script:{path}"


def cli(root: Path, *args: str) -> Result:
    return run_cli(*args, "-w", root, cwd=root)


def runs(root: Path) -> dict[str, dict[str, Any]]:
    return {d["run"]: d for d in json.loads(cli(root, "runs", "--json").out)}


def started(root: Path, run: str) -> RunStarted:
    first = Workspace.open(root).records(run=run, limit=1)[0]
    return first.typed(RunStarted)


def stopped_at_the_ceiling(root: Path) -> str:
    """A run frozen as `limit` after one turn (model `script`); returns its id."""
    spec = script(root, "first.jsonl", call("t1", "list_dir", {}))
    assert cli(root, "run", "list the files", "--model", spec, "--max-turns", "1").code == 5
    return Workspace.open(root).runs()[-1]


def stdin_cli(root: Path, stdin: str, *args: str) -> Result:
    from typer.testing import CliRunner

    from runfold.cli.main import app

    env: dict[str, str | None] = {"RUNFOLD_WORKSPACE": None, "NO_COLOR": "1", "COLUMNS": "200"}
    with contextlib.chdir(root):
        res = CliRunner().invoke(app, [*args, "-w", str(root)], env=env, input=stdin)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Result(res.exit_code, res.stdout, res.stderr)


# ---- the model a successor or a fork calls ---------------------------------------------------


def test_continue_with_another_model_records_the_model_it_calls(ws: Path) -> None:
    first = stopped_at_the_ceiling(ws)
    other = script(ws, "other.jsonl", text("done now"), model="model-b")
    res = cli(ws, "continue", first, "--model", other)
    assert res.code == 0, res.out + res.err
    successor = Workspace.open(ws).runs()[-1]
    assert started(ws, successor).model == "model-b"  # the audit record names the model called
    assert "· model model-b ·" in res.out.splitlines()[0]  # the live header too
    assert runs(ws)[successor]["model"] == "model-b"
    assert started(ws, first).model == "script"


# ---- forks: run when asked, read as not started when not -----------------------------------


def test_an_unrun_fork_reads_not_started_and_no_writer_freezes_it(ws: Path) -> None:
    first = stopped_at_the_ceiling(ws)
    at = str(Workspace.open(ws).records(run=first)[-1].seq)
    res = cli(ws, "fork", first, "--at", at)
    assert res.code == 0 and "not started" in res.out, res.out
    fork = Workspace.open(ws).runs()[-1]
    assert runs(ws)[fork]["status"] == "not_started"
    assert "not started" in cli(ws, "tree").out
    # the next writer (another run, a resume) leaves the fork as it is: no process died
    assert cli(ws, "run", "hello", "--model", script(ws, "hi.jsonl", text("hi"))).code == 0
    resumed = cli(ws, "resume")
    assert resumed.code == 0 and "not started" in resumed.out
    assert [r.kind_name for r in Workspace.open(ws).records(run=fork)] == ["run_started", "run_forked"]
    assert runs(ws)[fork]["status"] == "not_started"
    assert "process_died" not in cli(ws, "runs").out
    # continuing it runs it
    res = cli(ws, "continue", fork, "--model", script(ws, "go.jsonl", text("went on")))
    assert res.code == 0, res.out + res.err
    successor = Workspace.open(ws).runs()[-1]
    assert runs(ws)[successor]["status"] == "done" and runs(ws)[successor]["predecessor"] == fork


def test_fork_run_runs_the_fork_with_its_model_and_task(ws: Path) -> None:
    first = stopped_at_the_ceiling(ws)
    at = str(Workspace.open(ws).records(run=first)[-1].seq)
    other = script(ws, "fork.jsonl", text("forked and done"), model="model-f")
    res = cli(ws, "fork", first, "--at", at, "--run", "--model", other, "--task", "try again")
    assert res.code == 0, res.out + res.err
    assert "done: the model answered without calling a tool" in res.out
    fork = Workspace.open(ws).runs()[-1]
    row = runs(ws)[fork]
    assert row["status"] == "done" and row["relation"] == "fork" and row["forked_from"] == first
    assert row["model"] == "model-f" and started(ws, fork).model == "model-f"
    assert started(ws, fork).task == "try again"
    assert cli(ws, "replay", fork).code == 0
    refused = cli(ws, "fork", first, "--at", at, "--model", other)
    assert refused.code == 2 and "--run" in refused.err


# ---- a run whose process died ---------------------------------------------------------------


def test_a_run_without_a_live_writer_reads_died_not_running(ws: Path) -> None:
    w = Workspace.open(ws)
    rid = new_run_id()
    draft = Draft(rid, "person", "run_started", RunStarted(task="t", opening="with_person"))
    with w.writer() as led:
        led.append([draft])
        # while the writer lives, the run may be running
        assert runs(ws)[rid]["status"] == "running"
    # the writer is gone (as a killed process's lock is), nothing froze the run yet
    assert runs(ws)[rid]["status"] == "died"
    assert "died, not yet resumed" in cli(ws, "runs").out
    assert "died, not yet resumed" in cli(ws, "tree").out
    assert cli(ws, "resume").code == 0
    assert runs(ws)[rid]["status"] == "cancelled" and runs(ws)[rid]["cause"] == "process_died"


# ---- the stall guard ------------------------------------------------------------------------


def test_the_stall_guard_stop_says_what_happened(ws: Path) -> None:
    same = [call(f"s{i}", "list_dir", {}) for i in range(5)]
    res = cli(ws, "run", "loop", "--model", script(ws, "loop.jsonl", *same))
    assert res.code == 3
    assert (
        "\nstopped: the stall guard stopped the run: the model took the same action 4 times in a row, "
        "even after a corrective steer (E_LOOP_SUSPECTED)\n" in res.out
    ), res.out
    rid = Workspace.open(ws).runs()[-1]
    assert "failed (E_LOOP_SUSPECTED)" in cli(ws, "runs").out
    frozen = Workspace.open(ws).records(run=rid)[-1].env.data
    assert frozen["completion"] == "cancelled" and frozen["cause"] == "error"
    assert frozen["error"]["code"] == "E_LOOP_SUSPECTED"
    assert "stall guard" in README.read_text(encoding="utf-8")


# ---- an empty goal ------------------------------------------------------------------------


def test_a_continued_run_without_a_goal_opens_without_an_empty_goal(ws: Path) -> None:
    first = stopped_at_the_ceiling(ws)
    assert cli(ws, "continue", first, "--model", script(ws, "go.jsonl", text("ok"))).code == 0
    successor = Workspace.open(ws).runs()[-1]
    body = json.loads(cli(ws, "conversation", successor, "--json").out)["body"]
    opening = json.dumps(body)
    assert "<task>list the files</task>" in opening and "<goal>" not in opening
    assert cli(ws, "replay", successor).code == 0


# ---- RUN omitted, run -c, run - --------------------------------------------------------------


def test_run_omitted_means_the_latest_run_everywhere(ws: Path) -> None:
    empty = cli(ws, "conversation")
    assert empty.code == 2 and "runfold run TASK" in empty.err
    stopped_at_the_ceiling(ws)
    assert cli(ws, "run", "hi", "--model", script(ws, "hi.jsonl", text("hi"))).code == 0
    latest = Workspace.open(ws).runs()[-1]
    for verb in ("conversation", "why", "context", "replay"):
        res = cli(ws, verb, "--json")
        assert res.code == 0, (verb, res.out, res.err)
        assert json.loads(res.out)["run"] == latest, verb
    forked = json.loads(cli(ws, "fork", "--at", str(Workspace.open(ws).records(run=latest)[-1].seq), "--json").out)
    assert forked["from"] == latest
    res = cli(ws, "continue", "--model", script(ws, "c.jsonl", text("again")))
    assert res.code == 0, res.out + res.err
    assert started(ws, Workspace.open(ws).runs()[-1]).predecessor == forked["run"]


def test_run_continue_flag_continues_the_latest_run(ws: Path) -> None:
    first = stopped_at_the_ceiling(ws)
    res = cli(ws, "run", "-c", "now say it", "--model", script(ws, "c.jsonl", text("said")))
    assert res.code == 0, res.out + res.err
    successor = Workspace.open(ws).runs()[-1]
    p = started(ws, successor)
    assert p.predecessor == first and p.task == "now say it"
    res = cli(ws, "run", "--continue", "--model", script(ws, "d.jsonl", text("again")))
    assert res.code == 0 and started(ws, Workspace.open(ws).runs()[-1]).predecessor == successor
    assert cli(ws, "run").code == 2
    refused = cli(ws, "run", "-c", "--goal", "g")
    assert refused.code == 2 and "--goal" in refused.err


def test_run_dash_reads_the_task_from_standard_input(ws: Path) -> None:
    res = stdin_cli(ws, "summarize the notes\nbriefly\n", "run", "-", "--model", script(ws, "s.jsonl", text("ok")))
    assert res.code == 0, res.out + res.err
    assert started(ws, Workspace.open(ws).runs()[-1]).task == "summarize the notes\nbriefly"
    empty = stdin_cli(ws, "  \n", "run", "-", "--model", script(ws, "s.jsonl", text("ok")))
    assert empty.code == 2 and "standard input" in empty.err


# ---- log ------------------------------------------------------------------------------------


def test_log_tail_and_refused_negative_numbers(ws: Path) -> None:
    stopped_at_the_ceiling(ws)
    every = cli(ws, "log", "--json").out.splitlines()
    tail = cli(ws, "log", "--tail", "2", "--json").out.splitlines()
    assert tail == every[-2:]
    assert cli(ws, "log", "--tail", "0", "--json").out == ""
    for flag in ("--since", "--tail", "--limit"):
        res = cli(ws, "log", flag, "-1")
        assert res.code == 2 and f"{flag} -1" in res.err, (flag, res.err)
    assert cli(ws, "log", "--tail", "1", "--limit", "1").code == 2


def test_log_and_show_say_when_every_segment_is_empty(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    (root / ".runfold" / "ledger").mkdir(parents=True)
    (root / ".runfold" / "ledger" / "ledger-00000000000000000000.jsonl").write_bytes(b"")
    res = cli(root, "log")
    assert "segment files are empty" in res.err, res.err
    res = cli(root, "show", "0")
    assert res.code == 2 and "segment files are empty" in res.err, res.err


# ---- refused before anything is created -------------------------------------------------------


def test_undecodable_goal_or_room_is_refused_and_creates_nothing(ws: Path) -> None:
    spec = script(ws, "hi.jsonl", text("hi"))
    res = cli(ws, "run", "x", "--goal", "bad \udcff byte", "--model", spec)
    assert res.code == 2 and "E_INVALID_ARGS" in res.err and "--goal" in res.err, res.err
    res = cli(ws, "run", "x", "--room", "lab/r\udcff", "--model", spec)
    assert res.code == 2 and "--room" in res.err, res.err
    assert not (ws / "lab").exists()
    assert Workspace.open(ws).runs() == []


def test_a_run_refused_by_a_held_ledger_creates_no_room(ws: Path) -> None:
    spec = script(ws, "hi.jsonl", text("hi"))
    with Workspace.open(ws).writer():
        res = cli(ws, "run", "x", "--room", "lab/room1", "--model", spec)
    assert res.code == 3 and "E_LEDGER_HELD" in res.err, res.out + res.err
    assert not (ws / "lab").exists()
