"""The whole CLI on each store (the file ledger and PostgreSQL, by the `store_url` fixture):
init, run, runs, log, verify, replay, fork --run, a run killed then resumed and continued, a
steer from a second process; and `runfold migrate` files → PostgreSQL → files byte for byte."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import GOLDEN, GOLDEN_HEAD, run_cli

from runfold.api import Workspace


def script(path: Path, *entries: dict[str, Any]) -> str:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return f"script:{path}"


def reply(text: str, **extra: Any) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}], **extra}


def tool_call(cid: str, delay_ms: int = 0) -> dict[str, Any]:
    return {
        "content": [{"kind": "tool_use", "id": cid, "name": "list_dir", "input": "{}"}],
        "stop": "tool_use",
        "delay_ms": delay_ms,
    }


def cli_env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    out.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return out


def wait_for_kind(root: Path, kind: str, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [r for r in Workspace.open(root).records() if r.env.kind == kind]
        if found:
            return found[-1].env.run
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before writing {kind}: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"the run never wrote {kind}")


@pytest.fixture
def ws(tmp_path: Path, store_url: str | None) -> Path:
    root = tmp_path / "ws"
    args = ["init", "-w", root] + (["--store", store_url] if store_url else [])
    res = run_cli(*args, cwd=tmp_path)
    assert res.code == 0, res.err
    assert ("ledger in postgresql://" in res.out) == (store_url is not None)
    return root


def test_run_fork_replay_and_read_commands_work_on_each_store(ws: Path) -> None:
    spec = script(ws.parent / "s.jsonl", tool_call("c1"), reply("all listed"))
    res = run_cli("run", "list the room", "--model", spec, "--json", "-w", ws, cwd=ws)
    assert res.code == 0, res.err
    run = json.loads(res.out)["run"]
    assert run_cli("verify", "-w", ws, cwd=ws).code == 0
    assert "requests byte-exact" in run_cli("replay", run, "-w", ws, cwd=ws).out
    runs = run_cli("runs", "--json", "-w", ws, cwd=ws)
    assert [r["status"] for r in json.loads(runs.out)] == ["done"]
    log = run_cli("log", "-w", ws, cwd=ws)
    assert log.code == 0 and "run_frozen" in log.out
    at = next(r.seq for r in Workspace.open(ws).records(run=run) if r.env.kind == "tool_result")
    spec2 = script(ws.parent / "s2.jsonl", reply("forked and done"))
    fork = run_cli("fork", run, "--at", str(at), "--run", "--model", spec2, "--json", "-w", ws, cwd=ws)
    assert fork.code == 0, fork.err
    child = json.loads(fork.out)["run"]
    assert "requests byte-exact" in run_cli("replay", child, "-w", ws, cwd=ws).out
    shown = run_cli("show", str(at), "--json", "-w", ws, cwd=ws)
    assert shown.code == 0 and json.loads(shown.out)["line"] == at + 1
    assert run_cli("verify", "-w", ws, cwd=ws).code == 0


def test_a_killed_run_is_resumed_and_continued_on_each_store(ws: Path) -> None:
    spec = script(ws.parent / "slow.jsonl", tool_call("c1", delay_ms=60_000), reply("never"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "wait", "--model", spec, "-w", str(ws)],
        cwd=ws, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        run = wait_for_kind(ws, "model_called", proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while True:  # the store frees the writer once it sees the process gone
        shown = run_cli("resume", "--json", "-w", ws, cwd=ws)
        if shown.code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert shown.code == 0, shown.err
    assert [w["run"] for w in json.loads(shown.out)["waiting"]] == [run]
    spec2 = script(ws.parent / "s2.jsonl", reply("picked it up"))
    out = run_cli("continue", run[:13], "--model", spec2, "--json", "-w", ws, cwd=ws)
    assert out.code == 0, out.err
    assert run_cli("verify", "-w", ws, cwd=ws).code == 0


def test_a_steer_from_another_process_lands_on_each_store(ws: Path) -> None:
    spec = script(ws.parent / "s.jsonl", tool_call("c1", delay_ms=12_000), reply("steered"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "work", "--model", spec, "-w", str(ws)],
        cwd=ws, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    run = wait_for_kind(ws, "model_called", proc)
    steer = subprocess.run(
        [sys.executable, "-m", "runfold", "steer", run[:8], "use the staging db", "--wait", "-w", str(ws)],
        cwd=ws, env=cli_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert steer.returncode == 0, steer.stderr
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    steers = [r for r in Workspace.open(ws).records(run=run) if r.env.kind == "steer_received"]
    assert [s.env.data["text"] for s in steers] == ["use the staging db"]
    assert run_cli("verify", "-w", ws, cwd=ws).code == 0


def test_migrate_round_trip_is_byte_identical_and_refuses_a_full_target(tmp_path: Path, pg_url: str) -> None:
    to_pg = run_cli("migrate", GOLDEN, "--to", pg_url, "--json", cwd=tmp_path)
    assert to_pg.code == 0, to_pg.err
    assert json.loads(to_pg.out)["head"] == GOLDEN_HEAD
    again = run_cli("migrate", GOLDEN, "--to", pg_url, cwd=tmp_path)
    assert again.code == 2 and "already holds lines" in again.err
    assert run_cli("init", "-w", tmp_path / "pg", "--store", pg_url, cwd=tmp_path).code == 0
    verified = run_cli("verify", "--json", "-w", tmp_path / "pg", cwd=tmp_path)
    assert json.loads(verified.out)["head"] == GOLDEN_HEAD
    back = run_cli("migrate", tmp_path / "pg", "--to-file", tmp_path / "files", "--json", cwd=tmp_path)
    assert back.code == 0, back.err
    (segment,) = (tmp_path / "files" / ".runfold" / "ledger").glob("ledger-*.jsonl")
    assert segment.read_bytes() == GOLDEN.read_bytes()
    assert Workspace.open(tmp_path / "files").settings().store is None  # the copy is a file workspace
    full = run_cli("migrate", tmp_path / "pg", "--to-file", tmp_path / "files", cwd=tmp_path)
    assert full.code == 2 and "already holds ledger segments" in full.err
    neither = run_cli("migrate", GOLDEN, cwd=tmp_path)
    assert neither.code == 2 and "--to-file" in neither.err


def test_migrate_a_workspace_with_runs_and_back(tmp_path: Path, pg_url: str) -> None:
    ws = tmp_path / "ws"
    assert run_cli("init", "-w", ws, cwd=tmp_path).code == 0
    spec = script(tmp_path / "s.jsonl", tool_call("c1"), reply("done"))
    assert run_cli("run", "list", "--model", spec, "-w", ws, cwd=ws).code == 0
    head = json.loads(run_cli("verify", "--json", "-w", ws, cwd=ws).out)["head"]
    moved = run_cli("migrate", ws, "--to-file", tmp_path / "copy", cwd=tmp_path)
    assert moved.code == 0, moved.err
    assert json.loads(run_cli("verify", "--json", "-w", tmp_path / "copy", cwd=tmp_path).out)["head"] == head
    to_pg = run_cli("migrate", tmp_path / "copy", "--to", pg_url, "--json", cwd=tmp_path)
    assert to_pg.code == 0 and json.loads(to_pg.out)["head"] == head
    cfg = ws / ".runfold" / "config.toml"  # switch the original workspace to the store
    cfg.write_text(f'store = "{pg_url}"\n' + cfg.read_text(encoding="utf-8"), encoding="utf-8")
    assert json.loads(run_cli("verify", "--json", "-w", ws, cwd=ws).out)["head"] == head
    assert "requests byte-exact" in run_cli("replay", "-w", ws, cwd=ws).out


def test_verify_and_log_name_the_store_not_segment_files(tmp_path: Path, pg_url: str) -> None:
    ws = tmp_path / "ws"
    assert run_cli("init", "-w", ws, "--store", pg_url, cwd=tmp_path).code == 0
    verified = run_cli("verify", "-w", ws, cwd=tmp_path)
    assert verified.code == 0 and "bytes from postgresql://" in verified.out and "segment(s)" not in verified.out
    empty = tmp_path / "empty"  # a directory naming a workspace the database holds no line of
    (empty / ".runfold").mkdir(parents=True)
    (empty / ".runfold" / "config.toml").write_text(f'store = "{pg_url}-none"\n', encoding="utf-8")
    log = run_cli("log", "-w", empty, cwd=tmp_path)
    assert "the store holds no line for workspace" in log.err and "segment files" not in log.err, log.err
