"""Helpers for the server tests: a real `runfold serve` process on a free loopback port, its
HTTP API through httpx, scripted runs, and the event stream read as Server-Sent Events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from runfold.api import Workspace

START_TIMEOUT_S = 60.0


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    out.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return out


def write_script(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def ten_turns(path: Path, delay_ms: int = 0) -> Path:
    """A script of 10 turns: nine replies each listing one of the directories d0..d8, then a
    final answer (the workspace needs those directories: `make_workspace` creates them)."""
    entries: list[dict[str, Any]] = [
        {
            "content": [
                {"kind": "text", "text": f"step {i}"},
                {"kind": "tool_use", "id": f"t{i}", "name": "list_dir", "input": {"path": f"d{i}"}},
            ],
            **({"delay_ms": delay_ms} if delay_ms else {}),
        }
        for i in range(9)
    ]
    entries.append({"content": [{"kind": "text", "text": "all done"}]})
    return write_script(path, entries)


def cli(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`runfold ARGS -w ROOT` in a real process from ROOT; its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "runfold", *args, "-w", str(root)],
        cwd=root, env=env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def make_workspace(root: Path) -> Path:
    Workspace.init(root)
    for i in range(9):
        (root / f"d{i}").mkdir()
    return root


@dataclass
class Server:
    root: Path
    proc: subprocess.Popen[str]
    url: str
    token: str | None = None
    log: list[str] = field(default_factory=list)

    def client(self, token: str | None = None, timeout: float = 60.0) -> httpx.Client:
        tok = token if token is not None else self.token
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        return httpx.Client(base_url=self.url + "/api", headers=headers, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> str:
        """Stop the process with `sig`; returns its stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, err = self.proc.communicate()
        return err or ""


def start_server(root: Path, *args: str, token: bool = False) -> Server:
    """`runfold serve -w ROOT --port 0 ARGS` in a real process; waits until serve.json names it."""
    info = root / ".runfold" / "serve" / "serve.json"
    with_token = ["--new-token"] if token else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "serve", "-w", str(root), "--port", "0", *with_token, *args],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
        try:
            obj = json.loads(info.read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
            continue
        if obj.get("pid") == proc.pid:
            tok = Path(obj["token_file"]).read_text().strip() if obj.get("token_file") else None
            return Server(root, proc, obj["url"], tok)
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the server did not start in time")


def sse_events(client: httpx.Client, run: str, since: int = 0, headers: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """The events of `GET /api/runs/RUN/events` as `{id, event, data}` (comments skipped)."""
    with client.stream("GET", f"/runs/{run}/events", params={"since": since}, headers=headers or {}) as resp:
        assert resp.status_code == 200, resp.read()
        event: dict[str, Any] = {}
        for line in resp.iter_lines():
            if not line:
                if event:
                    yield event
                event = {}
                continue
            if line.startswith(":"):
                continue
            key, _, value = line.partition(": ")
            event[key] = value


def wait_state(client: httpx.Client, run: str, states: tuple[str, ...], timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        info = client.get(f"/runs/{run}").json()["run"]
        if info["state"] in states:
            return info
        time.sleep(0.05)
    raise AssertionError(f"run {run} stayed {info.get('state')}")
