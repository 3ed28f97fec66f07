"""Helpers of the web tests: a workspace with real scripted runs (one reads a file holding
hostile markup), a `runfold view` server in a real process, and the CLI in real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runfold.api import Workspace

REPO = Path(__file__).resolve().parents[2]
GARDEN = REPO / "examples" / "garden-session.jsonl"
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
"""What the to-do file holds: the tool result that reads it must render as text."""


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    out.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return out


def runfold(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`runfold ARGS -w ROOT` in a real process."""
    return subprocess.run(
        [sys.executable, "-m", "runfold", *args, "-w", str(root)],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def garden(root: Path) -> str:
    """A workspace at `root` with one finished scripted run whose `read_file` result holds
    `HOSTILE`; returns the run id."""
    Workspace.init(root)
    (root / "todo.md").write_text(f"water the tomatoes\n{HOSTILE}\n", encoding="utf-8")
    done = runfold(root, "run", "What is on the to-do list?", "--model", f"script:{GARDEN}", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    with Workspace.open(root) as ws:
        return ws.latest_run()


def kinds_at(root: Path, run: str, kind: str) -> list[int]:
    with Workspace.open(root) as ws:
        return [r.seq for r in ws.records(run=run, kind=kind)]


@contextmanager
def view_server(root: Path, *extra: str) -> Iterator[str]:
    """`runfold view -w ROOT --port 0` in a real process; yields its URL (no trailing slash)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "view", "-w", str(root), "--port", "0", *extra],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"(http://\S+?)/?$", line.strip())
        assert found, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        url = found.group(1).rstrip("/")
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/static/app.css", timeout=5)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def why_json(root: Path, run: str, at: int) -> dict[str, Any]:
    done = runfold(root, "why", run, "--at", str(at), "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data
