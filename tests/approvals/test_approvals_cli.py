"""Approvals end to end: a run in a real process waits for `runfold approve`/`deny` sent from
another process; a denial reaches the model (the provider test server sees it); `deny` policies,
a cancel while waiting, and a process killed while waiting (resume) all leave a valid history
that replays byte-exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from control.ctl_support import env, ledger_lines, runfold, wait_for, write_script
from provider_server import ProviderServer
from runfold.api import Workspace


def use(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}]}


def say(text: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}]}


def start(root: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "write the plan", *args, "-w", str(root)],
        cwd=root,
        env={**env(), **(extra_env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kinds(root: Path, run: str) -> list[str]:
    return [line["kind"] for line in ledger_lines(root) if line["run"] == run]


def data_of(root: Path, run: str, kind: str) -> list[dict[str, Any]]:
    return [line["data"] for line in ledger_lines(root) if line["run"] == run and line["kind"] == kind]


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_approve_from_another_process_lets_the_write_act(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    script = write_script(
        tmp_path / "s.jsonl", [use("call_w", "write_file", {"path": "plan.md", "content": "step 1\n"}), say("Wrote it.")]
    )
    proc = start(root, "--model", f"script:{script}", "--approve", "write=ask")
    run = wait_for(root, "approval_requested", proc)
    assert not (root / "plan.md").exists()  # it waits: nothing acted
    requested = data_of(root, run, "approval_requested")[0]
    assert requested["tool_use_id"] == "call_w" and requested["class"] == "write"
    assert "+step 1" in requested["preview"] and "b/plan.md" in requested["preview"]
    sent = runfold(root, "approve", run[:13], "call_w", "--wait", "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["state"] == "recorded"
    code, out, err = finish(proc)
    assert code == 0, out + err
    assert (root / "plan.md").read_text() == "step 1\n"
    assert "waits for approval: runfold approve" in out
    order = kinds(root, run)
    at = order.index("approval_requested")
    assert order[at - 1 : at + 3] == ["tool_called", "approval_requested", "approval_resolved", "tool_result"]
    resolved = data_of(root, run, "approval_resolved")[0]
    assert resolved["decision"] == "approved" and resolved["by"] == "person" and resolved["via"] == "inbox"
    assert data_of(root, run, "run_started")[0]["policy"]["approvals"] == {"write": "ask"}
    assert runfold(root, "verify").returncode == 0
    assert "ok: 2/2 requests byte-exact" in runfold(root, "replay", run).stdout


def test_a_denial_reaches_the_model_as_an_error_it_can_read(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    (root / ".runfold" / "config.toml").write_text('[approvals]\nexec = "ask"\n', encoding="utf-8")
    script = [use("call_x", "exec", {"command": "rm -rf build"}), say("Understood, I will not delete it.")]
    with ProviderServer(script) as server:
        proc = start(
            root,
            "--model",
            "anthropic:test-model",
            extra_env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.anthropic_url},
        )
        run = wait_for(root, "approval_requested", proc)
        assert data_of(root, run, "approval_requested")[0]["preview"].startswith("$ rm -rf build")
        sent = runfold(root, "deny", run, "call_x", "--reason", "keep the build dir, it holds the release")
        assert sent.returncode == 0, sent.stderr
        code, out, err = finish(proc)
    assert code == 0, out + err
    result = data_of(root, run, "tool_result")[0]
    assert result["error"]["code"] == "E_GATE_DENIED"
    assert "keep the build dir, it holds the release" in result["error"]["action"]
    # the model's next request carried the denial and its reason
    second = server.requests[1].raw.decode()
    assert "E_GATE_DENIED" in second and "keep the build dir, it holds the release" in second
    assert data_of(root, run, "approval_resolved")[0]["reason"] == "keep the build dir, it holds the release"
    # the denial's bytes in the window are the person's interaction
    why = runfold(root, "why", run, "--json")
    assert why.returncode == 0, why.stderr
    assert '"interaction"' in why.stdout
    assert "ok: 2/2 requests byte-exact" in runfold(root, "replay", run).stdout


def test_a_deny_policy_refuses_without_asking(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    script = write_script(tmp_path / "s.jsonl", [use("call_x", "exec", {"command": "echo hi > x"}), say("ok")])
    res = runfold(root, "run", "t", "--model", f"script:{script}", "--approve", "exec=deny", "--json")
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)["run"]
    assert "approval_requested" not in kinds(root, run)
    assert data_of(root, run, "gate_denied")[0]["tool_use_id"] == "call_x"
    assert data_of(root, run, "tool_result")[0]["error"]["code"] == "E_GATE_DENIED"
    assert not (root / "x").exists()


def test_a_cancel_while_waiting_freezes_the_run_and_the_call_never_ran(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    script = write_script(
        tmp_path / "s.jsonl", [use("call_w", "write_file", {"path": "plan.md", "content": "x"}), say("never")]
    )
    proc = start(root, "--model", f"script:{script}", "--approve", "write=ask")
    run = wait_for(root, "approval_requested", proc)
    assert runfold(root, "cancel", run, "--wait").returncode == 0
    code, out, err = finish(proc)
    assert code == 6, out + err
    resolved = data_of(root, run, "approval_resolved")[0]
    assert resolved["decision"] == "denied" and resolved["by"] == "runtime"
    result = data_of(root, run, "tool_result")[0]
    assert result["error"]["gate"]["rule"] == "a stopped run starts no new tool calls"
    assert not (root / "plan.md").exists()
    assert kinds(root, run)[-1] == "run_frozen"
    assert runfold(root, "verify").returncode == 0


def test_resume_closes_a_run_killed_while_waiting_for_approval(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    script = write_script(
        tmp_path / "s.jsonl", [use("call_w", "write_file", {"path": "plan.md", "content": "x"}), say("never")]
    )
    proc = start(root, "--model", f"script:{script}", "--approve", "write=ask")
    run = wait_for(root, "approval_requested", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    res = runfold(root, "resume")
    assert res.returncode == 0, res.stderr
    order = kinds(root, run)
    assert order[-4:] == ["approval_resolved", "tool_result", "handoff_written", "run_frozen"]
    resolved = data_of(root, run, "approval_resolved")[0]
    assert resolved["by"] == "runtime" and "waited for approval" in resolved["reason"]
    result = data_of(root, run, "tool_result")[0]
    assert result["error"]["code"] == "E_GATE_DENIED" and "never ran" in result["error"]["action"]
    assert not (root / "plan.md").exists()
    assert runfold(root, "verify").returncode == 0
    assert runfold(root, "resume").stdout.count("approval") == 0  # idempotent: nothing more written
    assert "ok: 1/1 requests byte-exact" in runfold(root, "replay", run).stdout
    # a decision for the dead run is refused plainly
    late = runfold(root, "approve", run, "call_w")
    assert late.returncode != 0 and "frozen" in late.stderr
