"""Helpers for the control tests: scripted runs in real `runfold` processes, the ledger read as
bytes, and the requests a run's model received, rebuilt from the ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runfold.api import Workspace
from runfold.core.kinds import Kind

WORKSPACE_RUN = "00000000-0000-0000-0000-000000000000"


def write_script(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    out.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return out


def start_run(root: Path, script: Path, task: str = "do the task") -> subprocess.Popen[str]:
    """`runfold run TASK --model script:FILE` in a real process, in the background."""
    return subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", task, "--model", f"script:{script}", "-w", str(root)],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def runfold(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`runfold ARGS -w ROOT` in a real process, waited for."""
    return subprocess.run(
        [sys.executable, "-m", "runfold", *args, "-w", str(root)],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ledger_text(root: Path) -> str:
    return "".join(
        p.read_text(encoding="utf-8") for p in sorted((root / ".runfold" / "ledger").glob("ledger-*.jsonl"))
    )


def ledger_lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger_text(root).splitlines() if line.strip()]


def wait_for(root: Path, kind: str, proc: subprocess.Popen[str], count: int = 1) -> str:
    """Poll the ledger until `count` flushed lines of `kind` exist; returns the run id of the
    last one. Fails when the process ends first."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = [line for line in ledger_lines(root) if line["kind"] == kind]
        if len(found) >= count:
            return str(found[-1]["run"])
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended before writing {kind}: {out}{err}")
        time.sleep(0.03)
    proc.kill()
    raise AssertionError(f"the run never wrote {kind}")


def request_bodies(ws: Workspace, run: str) -> list[bytes]:
    """The conversation of every request the run sent (the internal message list, before the
    dialect's cache markers), rebuilt from the ledger as `replay` does, as JSON bytes, in order."""
    called = [r.seq for r in ws.records(run=run) if r.known and r.kind is Kind.MODEL_CALLED]
    return [
        json.dumps(ws.fold(run, at=seq).messages, ensure_ascii=False, separators=(",", ":")).encode()
        for seq in called
    ]


def extends(earlier: bytes, later: bytes) -> bool:
    """True when the message list `later` starts with every message of `earlier`, byte-for-byte."""
    a, b = json.loads(earlier), json.loads(later)
    dump = lambda m: json.dumps(m, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    return len(b) >= len(a) and all(dump(x) == dump(y) for x, y in zip(a, b, strict=False))
