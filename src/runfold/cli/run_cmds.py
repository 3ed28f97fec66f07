"""`runfold run`, `runfold replay`, `runfold cost`: drive an agent, prove its requests, price it.

`run` is a thin shell around `Workspace.arun_spec`: it passes what was typed as a `RunSpec` (the
runtime fills in the defaults and checks the key), shows the live view, turns Ctrl-C into the
run's cancel event, prints the summary and maps the completion to an exit code. `replay` and `cost` print `Workspace.replay` / `Workspace.cost`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runfold.cli.common import (
    EXIT_CODES_HELP,
    EXIT_VERIFY_FAILED,
    JsonOption,
    WorkspaceOption,
    echo_json,
    out_console,
    want_json,
)
from runfold.cli.fold_cmds import chosen_run
from runfold.core.errors import invalid_args
from runfold.core.figures import count, usd

if TYPE_CHECKING:
    from runfold.api import CostReport, ReplayReport

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


def run_cmd(
    ctx: typer.Context,
    task: Annotated[
        str | None,
        typer.Argument(
            help="What the agent should do, in your words; `-` reads it from standard input. "
            "With --continue: new words for the task (default: the run's own).",
            show_default=False,
            metavar="TASK",
        ),
    ] = None,
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
    approve: Annotated[
        list[str] | None,
        typer.Option(
            "--approve",
            help=(
                "CLASS=POLICY, repeatable: the approval policy of a tool class for this run (classes "
                "read, write, exec, mcp; policies allow, ask, deny), over [approvals] of config.toml."
            ),
            show_default=False,
            metavar="CLASS=POLICY",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Allow every tool class for this run (no approval is asked)."),
    ] = False,
    agents: Annotated[
        bool,
        typer.Option(
            "--agents",
            help=(
                "Give the agent the agent tools: send_message (a letter to another running run), "
                "delegate (a child run; limits: [agents] of config.toml) and wait_for_reply."
            ),
        ),
    ] = False,
    continue_latest: Annotated[
        bool,
        typer.Option(
            "--continue",
            "-c",
            help="Continue the latest run (as `runfold continue` with RUN omitted) instead of starting one.",
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
      git diff | runfold run - --goal "a review of the diff"
      runfold run -c "now add the tests"
      runfold run "clean up the build dir" --approve exec=ask --approve write=ask
      runfold run "review src/ and tests/ in parallel" --agents --model anthropic:claude-sonnet-4-5
    """
    from runfold.runtime.spec import RunSpec

    want_json(ctx, json)
    words = read_task(task) if task is not None else None
    approvals = approval_flags(approve or [], yes)
    if continue_latest:
        if goal or room != "." or record is not None or agents:
            given = "--goal" if goal else "--room" if room != "." else "--record" if record is not None else "--agents"
            raise invalid_args(
                "continue the latest run", given, f"{given} applies to a new run: leave it out with --continue"
            )
        spec = RunSpec(
            words or "", model=model, max_turns=max_turns, continues="", command_line=True, approvals=approvals
        )
    elif words is None:
        raise invalid_args(
            "run an agent", "TASK", "give the task (`-` reads it from standard input), or --continue"
        )
    else:
        spec = RunSpec(
            words, goal, model, room, max_turns, record=record, command_line=True, approvals=approvals, agents=agents
        )
    from runfold.api import Workspace
    from runfold.cli.foreground import run_live

    ws = Workspace.open(workspace)
    if continue_latest:
        from dataclasses import replace

        try:
            spec = replace(spec, continues=ws.latest_run())
        except BaseException:
            ws.close()
            raise
    run_live(ctx, ws, spec, json, events=events)


def approval_flags(flags: list[str], yes: bool) -> dict[str, str] | None:
    """`--approve CLASS=POLICY` flags (the last for a class wins) and `--yes` (every class
    `allow`, refused together with a flag) as the run's policies; None when neither is given.
    Raises `E_INVALID_ARGS` naming a malformed flag."""
    from runfold.core.approval import CLASSES, parse_flag

    if yes and flags:
        raise invalid_args("set approval policies", "--yes with --approve", "give --yes or --approve, not both")
    if yes:
        return {c: "allow" for c in CLASSES}
    return dict(parse_flag(f) for f in flags) or None


def read_task(task: str) -> str:
    """The task as typed, or standard input's text when it is `-` (trailing line breaks cut).
    Raises `E_INVALID_ARGS` when standard input is a terminal, is not UTF-8 or holds no words."""
    if task != "-":
        return task
    import sys

    if sys.stdin is None or sys.stdin.isatty():
        raise invalid_args(
            "read the task from standard input", "TASK -", "pipe the task in (`echo 'fix it' | runfold run -`)"
        )
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        text = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise invalid_args(
            "read the task from standard input", "TASK -", "give the task as UTF-8 text"
        ) from None
    if not text.strip():
        raise invalid_args("read the task from standard input", "TASK -", "standard input was empty: pipe the task in")
    return text


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
            help="A run id or unique prefix. Default: the latest run you started, forked or continued (not a probe question or a delegated child).",
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
        rid = chosen_run(ws, run)
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
        if report.ok and report.requests == 0:
            why = f"{len(report.skipped)} not checkable" if report.skipped else "it sent no model request"
            out.print(f"nothing to replay: {why}", markup=False)
        else:
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
            count(r.calls),
            count(r.usage.input),
            count(r.usage.output),
            count(r.usage.cache_read),
            count(r.usage.cache_write),
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
        [t.name, count(t.calls), count(t.errors), f"{t.took_us / 1000:,.1f}", count(t.result_bytes)]
        for t in report.tools
    ]
    lines.extend(_table(["tool", "calls", "errors", "time ms", "result bytes"], tool_rows, {1, 2, 3, 4}))
    lines.append("")
    t = report.total
    lines.append(
        f"total: {count(t.calls)} replies · {count(t.usage.input)} in / {count(t.usage.output)} out tokens "
        f"({count(t.usage.cache_read)} cache read, {count(t.usage.cache_write)} cache write) · "
        f"cost {usd(t.billed_usd_micros)} · cache saved {usd(t.cache_savings_usd_micros)}"
    )
    if t.billed_usd_micros is None:
        unknown = sorted(r.key for r in report.models if r.billed_usd_micros is None)
        no_usage = sorted(r.key for r in report.models if r.billed_usd_micros is None and not r.usage_known)
        priced = [m for m in unknown if m not in no_usage]
        if priced:
            lines.append(
                "unknown: no price for " + ", ".join(priced) + '; add [prices."<model>"] to .runfold/config.toml'
            )
        if no_usage:
            lines.append(
                "unknown: " + ", ".join(no_usage) + " recorded no token usage on some replies, so their cost "
                "cannot be computed"
            )
    out_console().print("\n".join(lines), markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add `run`, `replay` and `cost` to `app`."""
    app.command("run", epilog=RUN_EPILOG)(run_cmd)
    app.command("replay", epilog=EXIT_CODES_HELP)(replay_cmd)
    app.command("cost", epilog=EXIT_CODES_HELP)(cost_cmd)


__all__ = ["register"]
