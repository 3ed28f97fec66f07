"""A real terminal for tests: one tmux session on a private server socket running one command,
whose screen is read and into which keys are typed (`.ci/run` installs tmux)."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


class Pane:
    """One tmux session on a private server socket, running one command."""

    def __init__(self, command: str, cwd: Path) -> None:
        self.socket = f"rf-{uuid.uuid4().hex[:12]}"
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME", "LANG")}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in keep.items())
        full = f"cd {shlex.quote(str(cwd))} && env NO_COLOR=1 {exports} {command}; echo EXITED=$?; sleep 600"
        self.tmux("new-session", "-d", "-s", "rf", "-x", "160", "-y", "50", full)

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True, timeout=30
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "rf")

    def wait_for(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.screen()
            if text in shown:
                return shown
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; the pane shows:\n{self.screen()}")

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "rf", "-l", line)
        self.tmux("send-keys", "-t", "rf", "Enter")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)

    def key(self, *keys: str) -> None:
        """Send tmux key names (`C-c`, `C-d`, `Enter`)."""
        self.tmux("send-keys", "-t", "rf", *keys)


@pytest.fixture
def pane_for() -> Iterator[Callable[[str, Path], Pane]]:
    """`pane_for(command, cwd)`: a new `Pane`; every pane made is closed after the test."""
    panes: list[Pane] = []

    def make(command: str, cwd: Path) -> Pane:
        panes.append(Pane(command, cwd))
        return panes[-1]

    yield make
    for p in panes:
        p.close()
