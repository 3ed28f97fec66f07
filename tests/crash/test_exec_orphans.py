"""No orphans: a command `exec` started never outlives runfold, and resume ends a recorded
process group that did.

`runfold run` is SIGKILLed while its `exec "sleep 3; touch marker"` sleeps: every process of the
command is gone (checked by pid) and the marker is never written (checked after the sleep would
have ended). The `tool_called` line of the call carries the group (`pgid`, `pstart`). When the
guard that ends groups is killed too (the worst case), `runfold resume` finds the recorded group
alive, kills it and says so in the call's result.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from crash_support import cli

from runfold.api import Workspace
from runfold.tools.exec_tool import process_start

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SLEEP_S = 12
"""The command sleeps this long before it would touch its marker; the test waits past it. Long
enough that a loaded machine still kills runfold while the command sleeps (checked before the kill)."""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _host_pids(token: str) -> list[int]:
    """Live processes of this machine whose command line holds `token` (a sandboxed command's
    own `$$` is a pid of its namespace, so its processes are found from outside)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    hit = token.encode() in f.read()
            except OSError:
                continue
            if hit and _alive(int(entry)):
                found.append(int(entry))
    return found


def _sleeping(token: str) -> bool:
    """Whether the command's `sleep` runs (so every process of the command exists by now)."""
    for pid in _host_pids(token):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(b"sleep\0"):
                    return True
        except OSError:
            continue
    return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(_alive(p) and os.getpgid(p) == pgid for p in _pids_safe())


def _pids_safe() -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                os.getpgid(int(entry))
            except ProcessLookupError:
                continue
            out.append(int(entry))
    return out


def _eventually(check: Any, tries: int = 200) -> bool:
    for _ in range(tries):  # SIGKILL is delivered asynchronously: "soon", never a timing claim
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def _start(root: Path, tmp: Path, command: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """`runfold run --events` whose model calls `exec command`; returns the process and the
    `tool_called` event once it is acknowledged (durable)."""
    script = tmp / "s.jsonl"
    call = {"kind": "tool_use", "id": "x1", "name": "exec", "input": json.dumps({"command": command})}
    lines = [{"content": [call]}, {"content": [{"kind": "text", "text": "never"}]}]
    script.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "sleep then touch", "--model", f"script:{script}", "--events"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    for raw in proc.stdout:
        event = json.loads(raw)
        if event["kind"] == "tool_called":
            return proc, event
    raise AssertionError("runfold ended before the exec call was recorded")


def _token() -> str:
    return f"{SLEEP_S}.{secrets.randbelow(10**9):09d}"


def test_sigkill_of_runfold_during_exec_leaves_no_process_and_no_marker(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    token = _token()
    proc, called = _start(root, tmp_path, f"sleep {token}; touch marker")
    ws = Workspace.open(root)
    data = ws.record_at(called["seq"]).env.data
    ws.close()
    pgid, pstart = data["pgid"], data["pstart"]
    assert isinstance(pgid, int) and isinstance(pstart, int) and process_start(pgid) == pstart
    assert _eventually(lambda: _sleeping(token)), "the command was started"
    pids = _host_pids(token)
    # every process of the command (the sandbox's init included) is in the recorded group, so
    # one killpg reaches all of them; none may depend on a parent-death signal (seen to miss)
    assert {os.getpgid(p) for p in pids} == {pgid}, f"{pids} are not all in group {pgid}"
    assert not (root / "marker").exists(), "the command finished its sleep before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _eventually(lambda: not _group_alive(pgid)), f"process group {pgid} outlived runfold"
    assert _eventually(lambda: not any(_alive(p) for p in pids)), f"{pids} outlived runfold"
    time.sleep(SLEEP_S + 1)  # past the moment the command would have touched its marker
    assert not (root / "marker").exists()
    res = cli("resume", "--json", "-w", root, cwd=root)
    assert res.code == 0, res.out + res.err
    (closed,) = json.loads(res.out)["closed"]
    assert closed["tool_use_id"] == "x1" and closed["killed_group"] is None  # nothing was left to kill


def _guard_of(pid: int) -> int:
    """The exec guard runfold process `pid` started (its child running the guard script)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid and b"groups = set()" in cmd:
                return int(entry)
    raise AssertionError("no exec guard found")


def test_resume_kills_a_recorded_group_still_alive_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    config = root / ".runfold" / "config.toml"
    config.write_text('[tools.exec]\nsandbox = "none"\n', encoding="utf-8")  # no parent-death signal
    token = _token()
    proc, called = _start(root, tmp_path, f"sleep 3{token}; touch marker")  # 33 s: killed first
    assert _eventually(lambda: bool(_host_pids(token)))
    guard = _guard_of(proc.pid)
    os.kill(guard, signal.SIGKILL)  # the worst case: the guard dies first, then runfold
    assert _eventually(lambda: not _alive(guard))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ws = Workspace.open(root)
    pgid = ws.record_at(called["seq"]).env.data["pgid"]
    ws.close()
    time.sleep(0.2)
    assert _group_alive(pgid), "the group should have survived runfold and its guard"
    res = cli("resume", "--json", "-w", root, cwd=root)
    assert res.code == 0, res.out + res.err
    (closed,) = json.loads(res.out)["closed"]
    assert closed["killed_group"] == pgid
    assert _eventually(lambda: not _group_alive(pgid))
    ws = Workspace.open(root)
    (result,) = [r.env.data for r in ws.records(kind="tool_result")]
    ws.close()
    assert result["error"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert f"process group {pgid} was still running and resume killed it" in result["error"]["action"]
    assert not (root / "marker").exists()


def test_resume_leaves_a_recycled_pid_alone(tmp_path: Path) -> None:
    from runfold.tools.exec_tool import end_recorded_group

    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        start = process_start(other.pid)
        assert start is not None
        assert not end_recorded_group(other.pid, start + 1)  # another process now has this id
        assert _alive(other.pid)
        assert end_recorded_group(other.pid, start)
        other.wait(timeout=30)
    finally:
        other.kill()
        other.wait()
