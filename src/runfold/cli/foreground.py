"""Driving a run in the foreground of a terminal (`runfold run`, `continue`): the event loop, Ctrl-C,
SIGTERM and SIGHUP handling, the live view, `--events` and the closing summary with its exit code.

It is the only CLI module that needs asyncio and signals, so commands that do not run an agent
(`--help`, `verify`, `log`) never load them: `run` and `continue` import it when they start.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from runfold.cli import common
from runfold.cli.common import (
    EXIT_CANCELLED,
    EXIT_ERROR,
    EXIT_INTERNAL,
    EXIT_LIMIT,
    EXIT_OK,
    echo_json,
    err_console,
    error_object,
    json_line,
    out_console,
    workspace_flag,
)
from runfold.cli.live import LiveView
from runfold.core.errors import ErrorCode
from runfold.core.figures import count, usd

if TYPE_CHECKING:
    from runfold.api import RunOutcome, Workspace
    from runfold.core.records import Record
    from runfold.runtime.spec import RunSpec

COMPLETION_EXIT: dict[str, int] = {
    "done": EXIT_OK,
    "limit": EXIT_LIMIT,
    "cancelled": EXIT_CANCELLED,
    "failed": EXIT_ERROR,
}
"""`RunOutcome.completion` → the exit code of `runfold run`."""

STOP_SIGNALS: tuple[tuple[str, str], ...] = (("SIGINT", "Ctrl-C"), ("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGHUP"))
"""The signals a foreground run handles as a cancel, with the name its notes give each: Ctrl-C
(SIGINT), a `kill` or a service manager's stop (SIGTERM), a closed terminal (SIGHUP)."""


class _Interrupts:
    """Ctrl-C (or SIGTERM, SIGHUP) during a run (see RUN_EPILOG): 1st sets the cancel event, 2nd
    says it is waiting, 3rd cancels the task driving the run (the executor then freezes it as
    cancelled). Either way the run is frozen with `cancel_received` and its tools are stopped."""

    def __init__(self, cancel: asyncio.Event, view: LiveView) -> None:
        self.cancel = cancel
        self.view = view
        self.presses = 0
        self.task: asyncio.Task[Any] | None = None

    def __call__(self, name: str = "Ctrl-C") -> None:
        self.presses += 1
        if self.presses == 1:
            self.cancel.set()
            self.view.note(
                f"{name}: cancelling: stopping what is in flight, then freezing the run as cancelled"
            )
        elif self.presses == 2:
            self.view.note(
                "still stopping what is in flight; press Ctrl-C once more to cancel the run's task at once"
            )
        elif self.task is not None and not self.task.done():
            self.view.note(f"{name}: stopping what is in flight and freezing the run as cancelled")
            self.task.cancel()


async def _drive(ws: Workspace, spec: RunSpec, view: LiveView, hooks: dict[str, Any]) -> RunOutcome:
    from runfold.runtime.spec import RunHooks

    cancel = asyncio.Event()
    interrupts = _Interrupts(cancel, view)
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig_name, shown in STOP_SIGNALS:
        sig = getattr(signal, sig_name, None)
        if sig is None:
            continue
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, interrupts, shown)
            installed.append(sig)
    try:
        runner = asyncio.ensure_future(ws.arun_spec(spec, RunHooks(cancel=cancel, **hooks)))
        interrupts.task = runner
        try:
            return await asyncio.shield(runner)
        except asyncio.CancelledError:
            # The third Ctrl-C cancelled `runner`: it froze the run and re-raised.
            with contextlib.suppress(asyncio.CancelledError):
                await runner
            raise
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        if installed:
            _ignore_sigint()  # the run is frozen: a late Ctrl-C must not interrupt the summary


async def _drive_then(
    ws: Workspace,
    spec: RunSpec,
    view: LiveView,
    hooks: dict[str, Any],
    after: Callable[[Workspace, RunOutcome, LiveView], Awaitable[None]] | None,
) -> RunOutcome:
    outcome = await _drive(ws, spec, view, hooks)
    if after is not None:
        await after(ws, outcome, view)
    return outcome


def _usage_obj(outcome: RunOutcome) -> dict[str, int]:
    u = outcome.usage
    return {"input": u.input, "output": u.output, "cache_read": u.cache_read, "cache_write": u.cache_write}


def _next_commands(run_id: str, fork_at: int | None, completion: str = "done", where: str = "") -> list[str]:
    """The commands the summary suggests; `where` is `workspace_flag(root)` (` -w DIR` when the
    current directory would not find the workspace), appended to each."""
    out = [f"runfold conversation {run_id}", f"runfold replay {run_id}", f"runfold cost {run_id}"]
    if completion != "done":
        out.insert(0, f"runfold continue {run_id}")
    if fork_at is not None:
        out.append(f"runfold fork {run_id} --at {fork_at}")
    out.append(f"runfold log --run {run_id}")
    return [cmd + where for cmd in out]


def run_live(
    ctx: typer.Context,
    ws: Workspace,
    spec: RunSpec,
    json: bool,
    *,
    events: bool = False,
    after: Callable[[Workspace, RunOutcome, LiveView], Awaitable[None]] | None = None,
) -> None:
    """Drive the run `spec` (as typed: the runtime fills in the defaults) with the live view
    (fed each line of the run once it is durable), Ctrl-C, SIGTERM and SIGHUP handling and the
    summary (`run`, `continue`); exits with the completion's code.
    `events`: print each durable line of the run as JSON Lines on stdout (`--events`), the live
    view and summary on stderr. `after(ws, outcome, view)` is awaited once the run is frozen, on
    the same event loop (a provider the run used may be used again), before the summary (a local
    run only). When `runfold serve` owns the workspace the run is handed to it
    (`runfold.cli.remote`)."""
    from runfold.cli.remote import run_remote, server_of

    remote = server_of(ws)
    if remote is not None:
        ws.close()
        run_remote(ctx, remote, spec, json, events=events, root=ws.root)
        return
    record = Path(spec.record) if spec.record is not None else None
    console = err_console() if json or events else out_console()
    view = LiveView(console, fancy=console.is_terminal)
    last_safe: list[int] = []
    printer = EventPrinter() if events else None

    def on_durable(rec: Record) -> None:
        # the view shows a line once it is durable (fsynced), never a line that may be lost
        if rec.env.kind in ("model_returned", "tool_result"):
            last_safe.append(rec.seq)
        view.on_event(rec)
        if printer is not None:
            printer(rec)

    hooks: dict[str, Any] = {"on_durable": on_durable, "on_delta": view.on_delta}
    if sys.stdin is not None and sys.stdin.isatty():
        from runfold.cli.approve_prompt import TerminalAsk

        hooks["ask"] = TerminalAsk(view)  # a call to approve asks here (and in the inbox)
    with _late_interrupts_ignored():
        try:
            with view:
                outcome = asyncio.run(_drive_then(ws, spec, view, hooks, after))
        except asyncio.CancelledError:
            # Three Ctrl-Cs: the run was frozen as cancelled by the executor.
            err_console().print("the run was stopped and frozen as cancelled", markup=False)
            ctx.exit(EXIT_CANCELLED)
            return
        finally:
            ws.close()
        finish(ctx, outcome, view, last_safe, record, json, events, workspace_flag(ws.root))


class EventPrinter:
    """`--events`: one JSON Lines object per durable line of the run on stdout, flushed at
    once. A closed stdout (e.g. `| head -1`) stops the printing, never the run."""

    def __init__(self) -> None:
        self.closed = False

    def __call__(self, rec: Record) -> None:
        if self.closed:
            return
        env = rec.env
        line = json_line({"seq": env.seq, "run": env.run, "kind": env.kind, "hash": rec.hash}) + "\n"
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        except (OSError, ValueError):
            self.closed = True


@contextlib.contextmanager
def _late_interrupts_ignored() -> Iterator[None]:
    """Once the run is frozen, a late Ctrl-C, SIGTERM or SIGHUP (sent while it was freezing) must
    not turn the summary into a KeyboardInterrupt or a kill: from the end of the run they are
    ignored (see `OWN_PROCESS` for when the previous handlers come back)."""
    previous: list[tuple[signal.Signals, Any]] = []
    for sig_name, _shown in STOP_SIGNALS:
        sig = getattr(signal, sig_name, None)
        if sig is None:
            continue
        with contextlib.suppress(ValueError):
            previous.append((sig, signal.getsignal(sig)))
    try:
        yield
    finally:
        if not common.OWN_PROCESS:
            for sig, handler in previous:
                if handler is not None:
                    with contextlib.suppress(ValueError):
                        signal.signal(sig, handler)


def _ignore_sigint() -> None:
    for sig_name, _shown in STOP_SIGNALS:
        sig = getattr(signal, sig_name, None)
        if sig is not None:
            with contextlib.suppress(ValueError):  # not the main thread: nothing to guard
                signal.signal(sig, signal.SIG_IGN)


def finish(
    ctx: typer.Context,
    outcome: RunOutcome,
    view: LiveView,
    last_safe: list[int],
    record: Path | None,
    json: bool,
    events: bool = False,
    where: str = "",
) -> None:
    """Print the outcome (summary or JSON) and exit with the completion's code; with `events`
    (and not `json`) the summary goes to stderr, keeping stdout JSON Lines. `where`: the
    ` -w DIR` the suggested commands need (see `workspace_flag`)."""
    fork_at = last_safe[-1] if last_safe else None
    nexts = _next_commands(outcome.run_id, fork_at, outcome.completion, where)
    code = COMPLETION_EXIT.get(outcome.completion, EXIT_ERROR)
    if outcome.error is not None and outcome.error.code is ErrorCode.INTERNAL:
        code = EXIT_INTERNAL  # frozen by a runfold bug
    if json:
        echo_json(
            {
                "ok": outcome.completion == "done",
                "run": outcome.run_id,
                "completion": outcome.completion,
                "reason": outcome.reason,
                "answer": view.last_reply if outcome.completion == "done" else None,
                "turns": outcome.turns,
                "attempts": outcome.attempts,
                "tool_calls": outcome.tool_calls,
                "usage": _usage_obj(outcome),
                "billed_usd_micros": outcome.billed_usd_micros,
                "evidence": [{"kind": e.kind, "seq": e.seq} for e in outcome.evidence],
                "frozen_seq": outcome.frozen_seq,
                "lines": outcome.lines,
                "ledger_bytes": outcome.ledger_bytes,
                "elapsed_ms": int(view.elapsed_s * 1000),
                "error": error_object(outcome.error) if outcome.error is not None else None,
                "recorded": str(record) if record is not None else None,
                "next": nexts,
                **view.extra,
            }
        )
    else:
        _print_summary(outcome, view, nexts, record, err_console() if events else out_console())
    if outcome.error is not None:
        err_console().print(outcome.error.display(), markup=False)
    if code != EXIT_OK:
        ctx.exit(code)


def completion_word(outcome: RunOutcome) -> str:
    """The summary's first word: the completion, but `stopped` for a run the stall guard ended
    (`E_LOOP_SUSPECTED`: nothing failed, the model kept repeating itself; the ledger records
    `cancelled` with `cause: error` and the error, DESIGN.md §4)."""
    if outcome.error is not None and outcome.error.code is ErrorCode.LOOP_SUSPECTED:
        return "stopped"
    return outcome.completion


def _print_summary(
    outcome: RunOutcome, view: LiveView, nexts: list[str], record: Path | None, console: Any
) -> None:
    u = outcome.usage
    calls = outcome.tool_calls
    cost = usd(outcome.billed_usd_micros)
    if outcome.billed_usd_micros is None:
        cost += ' (no price known for this model; add [prices."<model>"] to .runfold/config.toml)'
    head = completion_word(outcome)
    reason = outcome.reason
    if outcome.error is not None and head != "stopped":  # its error line follows on stderr: say it once
        reason = f"frozen by {outcome.error.code.value} (its error line is on stderr)"
    lines = ["", f"{head}: {reason}" if reason else head]
    if outcome.completion == "done" and view.last_reply:
        lines += ["", view.last_reply, ""]
    lines += [
        f"  run      {outcome.run_id}",
        f"  turns    {outcome.turns} ({outcome.attempts} model call{'s' if outcome.attempts != 1 else ''}),"
        f" {calls} tool call{'s' if calls != 1 else ''}",
        f"  tokens   {count(u.input)} in / {count(u.output)} out"
        f" ({count(u.cache_read)} cache read, {count(u.cache_write)} cache write)",
        f"  cost     {cost}",
        f"  elapsed  {view.elapsed_s:.1f} s · {count(outcome.lines)} ledger lines, {count(outcome.ledger_bytes)} bytes",
    ]
    if record is not None:
        lines.append(f"  recorded {record} (replay the session: --model script:{record})")
    lines.append("next:")
    lines.extend(f"  {c}" for c in nexts)
    console.print("\n".join(lines), markup=False, highlight=False)


# ---- replay -------------------------------------------------------------------------------

