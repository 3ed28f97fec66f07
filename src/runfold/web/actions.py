"""The page's actions — steer, cancel, fork from a seq, continue with a model, approve or deny a
call waiting for approval — behind one small interface, `WebActions`, so that the server that
mounts the pages (`runfold serve`, the owner of the workspace) passes its own and `runfold view`
alone uses `LocalActions`.

`LocalActions` acts as the CLI does: steer, cancel, approve and deny go through the workspace's
control inbox to the process running the run (`runfold run`, `runfold serve`); a fork is written under the
writer lock; a continue starts `runfold continue` as its own process. When another process holds
the ledger, a fork or continue is refused with a message saying which process and what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runfold.api import Workspace
from runfold.core.errors import ErrorCode, RunfoldError


class ActionError(Exception):
    """An action that could not be done: `message` is shown on the page (DESIGN.md §11 shape)."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Done:
    """What an action did: a `message` for the page and the `run` to show next (None: stay)."""

    message: str
    run: str | None = None


class WebActions(Protocol):
    """What the page's forms call. Each returns `Done` or raises `ActionError`."""

    def steer(self, run: str, text: str) -> Done: ...

    def cancel(self, run: str) -> Done: ...

    def fork(self, run: str, at: int, task: str | None) -> Done: ...

    def continue_run(self, run: str, model: str | None, task: str | None) -> Done: ...

    def decide(self, run: str, call: str, approve: bool, reason: str) -> Done:
        """Approve (`approve`) or deny, with `reason`, the call `call` (its `tool_use_id`) of
        `run` that waits for approval."""
        ...


HELD_RECOVERY = (
    "another process holds this workspace's ledger (pid {pid}): forks and continues from this page "
    "need it free — serve the workspace with `runfold serve` to act through its owner, or wait until "
    "that process ends"
)


def action_error(exc: RunfoldError) -> ActionError:
    """The page's message for `exc`: its display, or for a held ledger what to do instead."""
    if exc.code is ErrorCode.LEDGER_HELD:
        pid = "".join(ch for ch in exc.display().split("pid", 1)[-1][:12] if ch.isdigit()) or "unknown"
        return ActionError(f"{exc.code.value}: " + HELD_RECOVERY.format(pid=pid))
    status = 400 if exc.code is ErrorCode.INVALID_ARGS else 409
    return ActionError(exc.display(), status)


class LocalActions:
    """`WebActions` for `runfold view` alone (see the module docstring)."""

    def __init__(self, root: Path, *, wait_s: float = 10.0) -> None:
        self.root = root
        self.wait_s = wait_s
        self.started: list[subprocess.Popen[bytes]] = []
        """The `runfold continue` processes this object started (the server waits for none)."""

    def steer(self, run: str, text: str) -> Done:
        return self._control(run, "steer", text)

    def cancel(self, run: str) -> Done:
        return self._control(run, "cancel", "")

    def decide(self, run: str, call: str, approve: bool, reason: str) -> Done:
        return self._control(run, "approve" if approve else "deny", reason, call)

    def _control(self, run: str, type: str, text: str, call: str = "") -> Done:
        try:
            with Workspace.open(self.root) as ws:
                receipt = ws.send_control(run, type, text, call=call, wait_s=self.wait_s)
        except RunfoldError as exc:
            raise action_error(exc) from None
        what = f"{'approval' if type == 'approve' else 'denial'} of call {call}" if call else type
        if receipt.state == "queued":
            return Done(
                f"{what} queued as {receipt.signal}: the run's process (pid {receipt.owner_pid}) has not "
                "acknowledged it yet; it is delivered at the run's next safe point",
                receipt.run,
            )
        return Done(
            f"{what} {receipt.state} by the run's process (pid {receipt.owner_pid}) as {receipt.signal}; "
            "it lands at the run's next safe point",
            receipt.run,
        )

    def fork(self, run: str, at: int, task: str | None) -> Done:
        try:
            with Workspace.open(self.root) as ws:
                plan = ws.fork(run, at, task=task or None)
        except RunfoldError as exc:
            raise action_error(exc) from None
        moved = f" (the cut moved from seq {plan.asked}: {plan.moved})" if plan.moved else ""
        return Done(
            f"forked {plan.new_run} from {plan.mother} at seq {plan.cut}{moved}; "
            f"inherited {len(plan.inherited.messages)} message(s); not started — continue it to run it",
            plan.new_run,
        )

    def continue_run(self, run: str, model: str | None, task: str | None) -> Done:
        from runfold.store.layout import Layout
        from runfold.store.locks import lock_held

        try:
            with Workspace.open(self.root) as ws:
                rid = ws.resolve_run(run)
        except RunfoldError as exc:
            raise action_error(exc) from None
        lock = Layout(self.root).lock_path
        if lock_held(lock):
            pid = lock.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
            raise ActionError(f"{ErrorCode.LEDGER_HELD.value}: " + HELD_RECOVERY.format(pid=pid))
        cmd = [sys.executable, "-m", "runfold", "continue", rid, "-w", str(self.root)]
        if model:
            cmd += ["--model", model]
        if task:
            cmd += ["--task", task]
        log = tempfile.NamedTemporaryFile(prefix="runfold-continue-", suffix=".log", delete=False)
        env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
        proc = subprocess.Popen(cmd, cwd=self.root, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.started.append(proc)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not lock_held(lock):
            time.sleep(0.05)
        if proc.poll() not in (None, 0):
            text = Path(log.name).read_text(encoding="utf-8", errors="replace").strip()
            raise ActionError(text.splitlines()[-1] if text else f"runfold continue exited {proc.returncode}", 400)
        return Done(
            f"continuing {rid} in process {proc.pid} (`runfold continue`"
            f"{' --model ' + model if model else ''}); its output goes to {log.name}",
            rid,
        )
