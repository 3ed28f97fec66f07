"""`runfold run`, `runfold replay`, `runfold cost`: drive an agent, prove its requests, price it.

`run` is a thin shell around `Workspace.arun_spec`: it passes what was typed as a `RunSpec` (the
runtime fills in the defaults and checks the key), shows the live view, turns Ctrl-C into the
run's cancel event, prints the summary and maps the completion to an exit code. `replay` and `cost` print `Workspace.replay` / `Workspace.cost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runfold.cli.common import (
    EXIT_CANCELLED,
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_INTERNAL,
    EXIT_LIMIT,
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    JsonOption,
    WorkspaceOption,
    echo_json,
    err_console,
    error_object,
    json_line,
    out_console,
    want_json,
    workspace_flag,
)
from runfold.cli.live import LiveView, tokens, usd
from runfold.core.errors import ErrorCode, invalid_args

if TYPE_CHECKING:
    from runfold.api import CostReport, ReplayReport, RunOutcome, Workspace
    from runfold.core.records import Record
    from runfold.runtime.spec import RunSpec

COMPLETION_EXIT: dict[str, int] = {
    "done": EXIT_OK,
    "limit": EXIT_LIMIT,
    "cancelled": EXIT_CANCELLED,
    "failed": EXIT_ERROR,
}
"""`RunOutcome.completion` → the exit code of `runfold run`."""

RUN_EPILOG = (
    "Exit codes of run: 0 done · 5 limit (turn ceiling, empty reply, max_tokens stop) · "
    "6 cancelled (Ctrl-C) · 3 the run was frozen by an error, or another runfold error · "
    "2 bad usage (e.g. a malformed --model) · 4 internal error. "
    "Ctrl-C once: cancel — the model call or tool in flight is stopped (a stopped tool's result "
    "is E_TOOL_OUTCOME_UNKNOWN), calls not started get no line, the run is frozen as cancelled "
    "with a valid history; should something not stop, three times: cancel the task driving the "
    "run at once."
)


# ---- run ----------------------------------------------------------------------------------


class _Interrupts:
    """Ctrl-C during a run (see RUN_EPILOG): 1st sets the cancel event, 2nd says it is waiting,
    3rd cancels the task driving the run (the executor then freezes it as cancelled)."""

    def __init__(self, cancel: asyncio.Event, view: LiveView) -> None:
        self.cancel = cancel
        self.view = view
        self.presses = 0
        self.task: asyncio.Task[Any] | None = None

    def __call__(self) -> None:
        self.presses += 1
        if self.presses == 1:
            self.cancel.set()
            self.view.note(
                "Ctrl-C: cancelling: stopping what is in flight, then freezing the run as cancelled"
            )
        elif self.presses == 2:
            self.view.note(
                "still stopping what is in flight; press Ctrl-C once more to cancel the run's task at once"
            )
        elif self.task is not None and not self.task.done():
            self.view.note("Ctrl-C: stopping what is in flight and freezing the run as cancelled")
            self.task.cancel()


async def _drive(ws: Workspace, spec: RunSpec, view: LiveView, hooks: dict[str, Any]) -> RunOutcome:
    from runfold.runtime.spec import RunHooks

    cancel = asyncio.Event()
    interrupts = _Interrupts(cancel, view)
    loop = asyncio.get_running_loop()
    installed = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, interrupts)
        installed = True
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
        if installed:
            loop.remove_signal_handler(signal.SIGINT)
            _ignore_sigint()  # the run is frozen: a late Ctrl-C must not interrupt the summary


def _last_run(ws: Workspace) -> str:
    """The latest run that called a model (a fresh fork has nothing to replay yet)."""
    called = {r.env.run for r in ws.records(kind="model_called")}
    runs = [r for r in ws.runs() if r in called]
    if not runs:
        raise invalid_args(
            "pick the latest run that called a model",
            str(ws.root),
            "the ledger holds no model calls yet; start a run with `runfold run TASK`",
        )
    return runs[-1]


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


def run_cmd(
    ctx: typer.Context,
    task: Annotated[
        str,
        typer.Argument(help="What the agent should do, in your words.", show_default=False, metavar="TASK"),
    ],
    goal: Annotated[
        str,
        typer.Option(
            "--goal", help="What done looks like (put in the run's system segment).", metavar="TEXT"
        ),
    ] = "",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help=(
                "SPEC: local (the embedded model), anthropic:<model>, openai:<model>, "
                "openai-responses:<model>, openai-compat:<model>@<base-url>, script:<file>. "
                "Default: [defaults].model of .runfold/config.toml, else local."
            ),
            show_default=False,
            metavar="SPEC",
        ),
    ] = None,
    room: Annotated[
        str,
        typer.Option(
            "--room", help="The run's address inside the workspace: where it may write.", metavar="ADDR"
        ),
    ] = ".",
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns",
            help="Turn ceiling; reaching it freezes the run as limit. Default: config.toml, else none.",
            show_default=False,
            metavar="N",
        ),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            help="Write every reply to FILE as a scripted-model session (replay it with --model script:FILE).",
            show_default=False,
            metavar="FILE",
        ),
    ] = None,
    events: Annotated[
        bool,
        typer.Option(
            "--events",
            help=(
                "Print one JSON object per line of the run on stdout as soon as the line is durable "
                '(fsynced): {"seq", "run", "kind", "hash"}. A line printed here survives any crash. '
                "The live view and summary go to stderr (with --json the summary object is the last "
                "stdout line)."
            ),
        ),
    ] = False,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Run an agent on TASK in the workspace, to its end; every step is a ledger line first.

    Shows each turn, tool call (with its subject), tokens, cost and elapsed time while it runs,
    then a summary with the run id and the commands to look at it. Keys come from
    ANTHROPIC_API_KEY / OPENAI_API_KEY; base URLs from ANTHROPIC_BASE_URL / OPENAI_BASE_URL.

    \b
    Examples:
      runfold run "list the files and summarize notes.md" --max-turns 4
      runfold run "fix the typo in README" --model anthropic:claude-sonnet-4-5 --room docs
      runfold run "say hello" --model script:session.jsonl --json
      runfold run "tidy notes.md" --events | jq -c 'select(.kind == "tool_result")'
    """
    from runfold.runtime.spec import RunSpec

    want_json(ctx, json)
    spec = RunSpec(task, goal, model, room, max_turns, record=record, command_line=True)
    from runfold.api import Workspace

    run_live(ctx, Workspace.open(workspace), spec, json, events=events)


def run_live(ctx: typer.Context, ws: Workspace, spec: RunSpec, json: bool, *, events: bool = False) -> None:
    """Drive the run `spec` (as typed: the runtime fills in the defaults) with the live view,
    Ctrl-C handling and the summary (`run`, `continue`); exits with the completion's code.
    `events`: print each durable line of the run as JSON Lines on stdout (`--events`), the live
    view and summary on stderr."""
    record = Path(spec.record) if spec.record is not None else None
    console = err_console() if json or events else out_console()
    view = LiveView(console, fancy=console.is_terminal)
    last_safe: list[int] = []

    def on_event(rec: Record) -> None:
        if rec.env.kind in ("model_returned", "tool_result"):
            last_safe.append(rec.seq)
        view.on_event(rec)

    hooks: dict[str, Any] = {"on_event": on_event, "on_delta": view.on_delta}
    if events:
        hooks["on_durable"] = _EventPrinter()
    with _late_interrupts_ignored():
        try:
            with view:
                outcome = asyncio.run(_drive(ws, spec, view, hooks))
        except asyncio.CancelledError:
            # Three Ctrl-Cs: the run was frozen as cancelled by the executor.
            err_console().print("the run was stopped and frozen as cancelled", markup=False)
            ctx.exit(EXIT_CANCELLED)
            return
        finally:
            ws.close()
        _finish(ctx, outcome, view, last_safe, record, json, events, workspace_flag(ws.root))


class _EventPrinter:
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


OWN_PROCESS = False
"""True when the command owns its process (set by `runfold.cli.main.main`): then a Ctrl-C that
arrives after the run is frozen stays ignored until the process exits, so the exit code is the
run's (6 for cancelled), not an interrupt's. In-process callers (tests, embedding) get their
SIGINT handler back when the command returns."""


@contextlib.contextmanager
def _late_interrupts_ignored() -> Iterator[None]:
    """Once the run is frozen, a late Ctrl-C (pressed while it was freezing) must not turn the
    summary into a KeyboardInterrupt: from the end of the run SIGINT is ignored (see
    `OWN_PROCESS` for when the previous handler comes back)."""
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:
        previous = None
    try:
        yield
    finally:
        if previous is not None and not OWN_PROCESS:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGINT, previous)


def _ignore_sigint() -> None:
    with contextlib.suppress(ValueError):  # not the main thread: nothing to guard
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _finish(
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
            }
        )
    else:
        _print_summary(outcome, view, nexts, record, err_console() if events else out_console())
    if outcome.error is not None:
        err_console().print(outcome.error.display(), markup=False)
    if code != EXIT_OK:
        ctx.exit(code)


def _print_summary(
    outcome: RunOutcome, view: LiveView, nexts: list[str], record: Path | None, console: Any
) -> None:
    u = outcome.usage
    calls = outcome.tool_calls
    cost = usd(outcome.billed_usd_micros)
    if outcome.billed_usd_micros is None:
        cost += ' (no price known for this model; add [prices."<model>"] to .runfold/config.toml)'
    lines = [
        "",
        f"{outcome.completion}: {outcome.reason}" if outcome.reason else outcome.completion,
    ]
    if outcome.completion == "done" and view.last_reply:
        lines += ["", view.last_reply, ""]
    lines += [
        f"  run      {outcome.run_id}",
        f"  turns    {outcome.turns} ({outcome.attempts} model call{'s' if outcome.attempts != 1 else ''}),"
        f" {calls} tool call{'s' if calls != 1 else ''}",
        f"  tokens   {tokens(u.input)} in / {tokens(u.output)} out"
        f" ({tokens(u.cache_read)} cache read, {tokens(u.cache_write)} cache write)",
        f"  cost     {cost}",
        f"  elapsed  {view.elapsed_s:.1f} s · {outcome.lines} ledger lines, {outcome.ledger_bytes:,} bytes",
    ]
    if record is not None:
        lines.append(f"  recorded {record} (replay the session: --model script:{record})")
    lines.append("next:")
    lines.extend(f"  {c}" for c in nexts)
    console.print("\n".join(lines), markup=False, highlight=False)


# ---- replay -------------------------------------------------------------------------------


def _replay_json(report: ReplayReport) -> dict[str, Any]:
    m = report.first_mismatch
    return {
        "ok": report.ok,
        "run": report.run,
        "requests": report.requests,
        "exact": report.exact,
        "first_mismatch": (
            None
            if m is None
            else {"seq": m.seq, "expected": m.expected, "rebuilt": m.rebuilt, "where": m.where}
        ),
        "skipped": [{"seq": s, "why": w} for s, w in report.skipped],
        "invalid": [{"seq": s, "rule": r} for s, r in report.invalid],
        "summary": report.summary(),
    }


def replay_cmd(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(
            help="A run id or unique prefix. Default: the latest run that called a model.",
            show_default=False,
            metavar="RUN",
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Rebuild the exact body of every model request of RUN from the ledger and check its hash.

    Prints `N/N requests byte-exact`, or the first request that differs and where; exits 1 then.
    Never calls a model, never runs a tool, never writes: it works offline.

    \b
    Examples:
      runfold replay
      runfold replay 01a22d10 --json
    """
    as_json = want_json(ctx, json)
    from runfold.api import Workspace

    with Workspace.open(workspace) as ws:
        rid = ws.resolve_run(run) if run is not None else _last_run(ws)
        report = ws.replay(rid)
    if as_json:
        echo_json(_replay_json(report))
    else:
        out = out_console()
        out.print(f"run {report.run}", markup=False)
        for seq, why in report.skipped:
            out.print(f"  seq {seq}: not checkable ({why})", markup=False)
        for seq, rule in report.invalid:
            out.print(f"  seq {seq}: the rebuilt request breaks the provider rule {rule}", markup=False)
        out.print(("ok: " if report.ok else "MISMATCH: ") + report.summary(), markup=False)
    if not report.ok:
        ctx.exit(EXIT_VERIFY_FAILED)


# ---- cost ---------------------------------------------------------------------------------


def _row_json(row: Any) -> dict[str, Any]:
    u = row.usage
    return {
        "key": row.key,
        "calls": row.calls,
        "usage": {
            "input": u.input,
            "output": u.output,
            "cache_read": u.cache_read,
            "cache_write": u.cache_write,
        },
        "billed_usd_micros": row.billed_usd_micros,
        "cache_savings_usd_micros": row.cache_savings_usd_micros,
        "models": sorted(row.models),
    }


def _cost_json(report: CostReport) -> dict[str, Any]:
    return {
        "ok": True,
        "runs": [_row_json(r) for r in report.runs],
        "models": [_row_json(r) for r in report.models],
        "tools": [
            {
                "name": t.name,
                "calls": t.calls,
                "errors": t.errors,
                "took_us": t.took_us,
                "result_bytes": t.result_bytes,
            }
            for t in report.tools
        ],
        "total": _row_json(report.total),
    }


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        return "  ".join(cells).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]


def _money_rows(rows: list[Any], name: Any) -> list[list[str]]:
    return [
        [
            name(r),
            str(r.calls),
            tokens(r.usage.input),
            tokens(r.usage.output),
            tokens(r.usage.cache_read),
            tokens(r.usage.cache_write),
            usd(r.billed_usd_micros),
            usd(r.cache_savings_usd_micros),
        ]
        for r in rows
    ]


MONEY_HEADER = ["", "replies", "input", "output", "cache read", "cache write", "cost", "cache saved"]


def cost_cmd(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(
            help="A run id or unique prefix. Default: every run of the workspace.",
            show_default=False,
            metavar="RUN",
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    json: JsonOption = False,
) -> None:
    """Tokens and cost (micro-USD shown as dollars) by run, by model and by tool, with what the
    prompt cache saved. A model with no known price shows `unknown`, never $0.

    \b
    Examples:
      runfold cost
      runfold cost 01a22d10 --json
    """
    as_json = want_json(ctx, json)
    from runfold.api import Workspace

    with Workspace.open(workspace) as ws:
        report = ws.cost(run)
    if as_json:
        echo_json(_cost_json(report))
        return
    lines: list[str] = []
    right = set(range(1, 8))
    lines.extend(_table(["run", *MONEY_HEADER[1:]], _money_rows(report.runs, lambda r: r.key), right))
    lines.append("")
    lines.extend(_table(["model", *MONEY_HEADER[1:]], _money_rows(report.models, lambda r: r.key), right))
    lines.append("")
    tool_rows = [
        [t.name, str(t.calls), str(t.errors), f"{t.took_us / 1000:.1f}", f"{t.result_bytes:,}"]
        for t in report.tools
    ]
    lines.extend(_table(["tool", "calls", "errors", "time ms", "result bytes"], tool_rows, {1, 2, 3, 4}))
    lines.append("")
    t = report.total
    lines.append(
        f"total: {t.calls} replies · {tokens(t.usage.input)} in / {tokens(t.usage.output)} out tokens "
        f"({tokens(t.usage.cache_read)} cache read, {tokens(t.usage.cache_write)} cache write) · "
        f"cost {usd(t.billed_usd_micros)} · cache saved {usd(t.cache_savings_usd_micros)}"
    )
    if t.billed_usd_micros is None:
        unknown = sorted(r.key for r in report.models if r.billed_usd_micros is None)
        lines.append(
            "unknown: no price for " + ", ".join(unknown) + '; add [prices."<model>"] to .runfold/config.toml'
        )
    out_console().print("\n".join(lines), markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add `run`, `replay` and `cost` to `app`."""
    app.command("run", epilog=RUN_EPILOG)(run_cmd)
    app.command("replay", epilog=EXIT_CODES_HELP)(replay_cmd)
    app.command("cost", epilog=EXIT_CODES_HELP)(cost_cmd)


__all__ = ["COMPLETION_EXIT", "register"]
